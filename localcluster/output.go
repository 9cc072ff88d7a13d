package localcluster

import (
	"bytes"
	"fmt"
	"io"
	"sync"
)

// maxLine is the longest line written whole; longer lines are cut into
// pieces of this size.
const maxLine = 1 << 20

// maxKept bounds each line a tail keeps, so that a task's tail holds at most
// TailLines times this many bytes.
const maxKept = 8 << 10

// lineWriter splits a stream into lines and hands each to emit, without its
// newline: complete is false for a piece of a line longer than maxLine and
// for the unterminated end of the stream (see flush). One goroutine at a
// time may call Write; emit must not keep line.
type lineWriter struct {
	emit    func(line []byte, complete bool)
	partial []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		seg := p
		if i >= 0 {
			seg = p[:i]
		}
		for len(w.partial)+len(seg) > maxLine {
			take := maxLine - len(w.partial)
			if len(w.partial) == 0 {
				w.emit(seg[:take], false)
			} else {
				w.partial = append(w.partial, seg[:take]...)
				w.emit(w.partial, false)
				w.partial = w.partial[:0]
			}
			seg = seg[take:]
		}
		if i < 0 {
			w.partial = append(w.partial, seg...)
			break
		}
		if len(w.partial) == 0 {
			w.emit(seg, true)
		} else {
			w.partial = append(w.partial, seg...)
			w.emit(w.partial, true)
			w.partial = w.partial[:0]
		}
		p = p[i+1:]
	}
	return n, nil
}

// flush emits the unterminated end of the stream, if any. It must not run
// concurrently with Write.
func (w *lineWriter) flush() {
	if len(w.partial) > 0 {
		w.emit(w.partial, false)
		w.partial = nil
	}
}

// tail keeps the last lines of a task's output. It is safe for concurrent
// use.
type tail struct {
	mu    sync.Mutex
	lines [][]byte // a ring of at most cap lines, oldest at next once full
	next  int
	cap   int
	total int // lines ever added
}

func newTail(n int) *tail { return &tail{cap: n} }

// add keeps a copy of line, cut to maxKept bytes, dropping the oldest line
// when the tail is full.
func (t *tail) add(line []byte) {
	kept := line
	if len(kept) > maxKept {
		kept = fmt.Appendf(bytes.Clone(kept[:maxKept]), " ... (%d bytes cut)", len(line)-maxKept)
	} else {
		kept = bytes.Clone(kept)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total++
	if len(t.lines) < t.cap {
		t.lines = append(t.lines, kept)
		return
	}
	t.lines[t.next] = kept
	t.next = (t.next + 1) % t.cap
}

// snapshot returns the kept lines, oldest first, and how many earlier
// lines were dropped.
func (t *tail) snapshot() (lines [][]byte, dropped int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines = append(lines, t.lines[t.next:]...)
	lines = append(lines, t.lines[:t.next]...)
	return lines, t.total - len(t.lines)
}

// output serialises the lines of every task and of the launcher onto the
// run's two writers, so that no two lines interleave. Write errors are
// ignored: a closed terminal must not stop the training.
type output struct {
	mu     sync.Mutex
	stdout io.Writer
	stderr io.Writer
	buf    []byte // under mu
}

// write writes prefix, line and, when newline is set, a newline to w in one
// Write call.
func (o *output) write(w io.Writer, prefix string, line []byte, newline bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf = append(append(o.buf[:0], prefix...), line...)
	if newline {
		o.buf = append(o.buf, '\n')
	}
	_, _ = w.Write(o.buf)
	if cap(o.buf) > 64<<10 {
		o.buf = nil // do not hold on to a long line's buffer
	}
}

// logf writes one line of the launcher's own.
func (o *output) logf(format string, args ...any) {
	o.write(o.stderr, "local cluster: ", fmt.Appendf(nil, format, args...), true)
}

// passthrough copies lines to stdout as they came, newlines included, so
// that the chief's results are the run's.
func (o *output) passthrough() *lineWriter {
	return &lineWriter{emit: func(line []byte, complete bool) { o.write(o.stdout, "", line, complete) }}
}

// prefixed copies lines to stderr, each after prefix and ending in a newline.
func (o *output) prefixed(prefix string) *lineWriter {
	return &lineWriter{emit: func(line []byte, _ bool) { o.write(o.stderr, prefix, line, true) }}
}

// toTail keeps lines in t.
func toTail(t *tail) *lineWriter {
	return &lineWriter{emit: func(line []byte, _ bool) { t.add(line) }}
}

// dumpTail writes the lines t kept to stderr after prefix, noting how many
// earlier lines it dropped.
func (o *output) dumpTail(t *tail, prefix string) {
	lines, dropped := t.snapshot()
	if dropped > 0 {
		o.write(o.stderr, prefix, fmt.Appendf(nil, "... (%d earlier lines not kept)", dropped), true)
	}
	for _, l := range lines {
		o.write(o.stderr, prefix, l, true)
	}
}
