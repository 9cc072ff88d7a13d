// Package testlog holds a log destination for tests whose loggers write
// from several goroutines at once.
package testlog

import (
	"strings"
	"sync"
)

// Buffer collects what is written to it, safe for concurrent use; the zero
// value is ready. Tests hand it to slog handlers and read it with String.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
