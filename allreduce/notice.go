package allreduce

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// A failure notice is a chunk of no members (Size 0) that a rank or a
// summation server sends to the other members of an operation it failed,
// so that they end the operation at once, for the same reason, instead of
// waiting for chunks that will not come until their deadline. Its Index
// says why (0, noticeFailed, is also what a sender that names no cause
// sends).
const (
	noticeFailed    = 0 // any failure (a summation server's)
	noticeMismatch  = 1 // the ranks' data do not match: ErrMismatch
	noticeNonFinite = 2 // a non-finite value: ErrNonFinite
	// noticeServers: a member saw the operation fail through the
	// summation servers (a server died): ErrServerFailed.
	noticeServers = 3
)

// noticeTimeout bounds the sending of a failure notice to a member.
const noticeTimeout = 5 * time.Second

// noticeCause returns the cause of an operation's failure worth telling
// the other members about: a failure that they would otherwise take for a
// slow or lost peer, since the operation will fail again whatever the
// ring. Other failures (a lost peer, a deadline) give noticeFailed.
func noticeCause(err error) int {
	switch {
	case errors.Is(err, ErrMismatch):
		return noticeMismatch
	case errors.Is(err, ErrNonFinite):
		return noticeNonFinite
	}
	return noticeFailed
}

// noticeError is the failure of an operation that a member's notice
// ended: it is not told on (the member that found the cause told every
// other member).
type noticeError struct{ err error }

func (e *noticeError) Error() string { return e.err.Error() }
func (e *noticeError) Unwrap() error { return e.err }

// deliverNotice ends c's operation as the notice c says. A member's notice
// of no cause that members send is malformed: it fails the operation with
// ErrMismatch, which Deliver returns.
func (r *Ring) deliverNotice(c *Chunk) error {
	var told error
	switch who := r.peer(c.From); {
	case c.Index == noticeMismatch:
		told = fmt.Errorf("%w: rank %d: %v: %s found that the ranks' data do not match (do all ranks run the same model, with the same flags?)", ErrMismatch, r.rank, c.Op, who)
	case c.Index == noticeNonFinite:
		told = fmt.Errorf("%w: rank %d: %v: %s found a non-finite value", ErrNonFinite, r.rank, c.Op, who)
	case c.From >= r.size:
		told = fmt.Errorf("summation server %s failed the operation", who)
	case c.Index == noticeServers:
		told = fmt.Errorf("%w: rank %d: %v: %s saw the operation fail on the summation servers", ErrServerFailed, r.rank, c.Op, who)
	default:
		err := fmt.Errorf("%w: rank %d: %v: %s sent a failure notice of unknown cause %d", ErrMismatch, r.rank, c.Op, who, c.Index)
		r.box.notice(c.Op, c.From, err)
		return err
	}
	r.box.notice(c.Op, c.From, &noticeError{told})
	return nil
}

// notify sends the notice of op's failure for cause to each of members
// but this rank, concurrently, and returns when all are sent or given up,
// within noticeTimeout and at the latest when ctx ends (a member that
// cannot be reached ends the operation at its own deadline).
func (r *Ring) notify(ctx context.Context, op Op, members []int, cause int) {
	ctx, cancel := context.WithTimeout(ctx, noticeTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, m := range members {
		if m != r.rank {
			wg.Go(func() {
				st, err := r.tr.Open(ctx, m, op)
				if err != nil {
					return
				}
				if err := st.Send(&Chunk{Op: op, From: r.rank, Index: cause}); err != nil {
					st.Abort()
					return
				}
				st.Close()
			})
		}
	}
	wg.Wait()
}
