package session

import "io"

// WithCloser makes Session.Close also close c: the connection that a
// transport dialled for the master given by WithMaster, which must come
// before it.
func WithCloser(c io.Closer) Option {
	return func(s *Session) {
		if s.remote != nil {
			s.remote.closer = c
		}
	}
}
