package summary

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	pb "github.com/distflow/distflow/proto/distflowpb"
	"google.golang.org/protobuf/proto"
)

// FileVersion is the file_version of the first event of every event file.
const FileVersion = "brain.Event:2"

// DefaultFlushInterval is how often a Writer flushes in the background
// unless WriterOptions says otherwise.
const DefaultFlushInterval = 10 * time.Second

// ErrClosed is returned by the methods of a closed Writer.
var ErrClosed = errors.New("summary: writer is closed")

// WriterOptions configures a Writer. The zero value is valid.
type WriterOptions struct {
	// Suffix ends the file name and keeps apart the files of writers that
	// share a log directory, host and process: use the task ("worker-1").
	// Characters other than letters, digits, '.', '_' and '-' become '_'.
	// Files never collide anyway (they are created exclusively, with a
	// counter appended on a clash), but a suffix keeps the names readable.
	Suffix string
	// FlushInterval is the period of the background flush: 0 means
	// DefaultFlushInterval, a negative value none (only Flush and Close
	// write buffered events to the file).
	FlushInterval time.Duration
	// Logger receives the errors of background flushes; nil means slog.Default().
	Logger *slog.Logger
	// Now gives wall times; nil means time.Now.
	Now func() time.Time
}

// Writer appends events to one TensorBoard event file. Events are buffered
// and reach the file on Flush, Close, a full buffer or the background flush.
// A Writer is safe for concurrent use. The first write or flush error is
// sticky: every later call returns it.
type Writer struct {
	path   string
	now    func() time.Time
	logger *slog.Logger

	mu     sync.Mutex
	f      *os.File
	bw     *bufio.Writer
	buf    []byte // scratch for framing, reused under mu
	err    error  // sticky write error
	closed bool

	stop chan struct{}
	done chan struct{}
}

// NewWriter creates the directory logdir if needed and a new event file in
// it named events.out.tfevents.<unix seconds>.<hostname>.<pid>[.<suffix>],
// and writes the file_version event. The file is created exclusively: two
// writers never share one.
func NewWriter(logdir string, opts WriterOptions) (*Writer, error) {
	if logdir == "" {
		return nil, errors.New("summary: new writer: empty log directory")
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	if err := os.MkdirAll(logdir, 0o755); err != nil {
		return nil, fmt.Errorf("summary: new writer: %w", err)
	}
	f, err := createEventFile(logdir, eventFileName(now(), opts.Suffix))
	if err != nil {
		return nil, err
	}
	w := &Writer{path: f.Name(), now: now, logger: logger, f: f, bw: bufio.NewWriterSize(f, 64<<10)}
	err = w.AddEvent(&pb.Event{What: &pb.Event_FileVersion{FileVersion: FileVersion}})
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		f.Close()
		os.Remove(w.path)
		return nil, err
	}
	if opts.FlushInterval >= 0 {
		interval := opts.FlushInterval
		if interval == 0 {
			interval = DefaultFlushInterval
		}
		w.stop, w.done = make(chan struct{}), make(chan struct{})
		go w.flushEvery(interval)
	}
	return w, nil
}

func eventFileName(t time.Time, suffix string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	name := "events.out.tfevents." + strconv.FormatInt(t.Unix(), 10) + "." + sanitize(host) + "." + strconv.Itoa(os.Getpid())
	if suffix != "" {
		name += "." + sanitize(suffix)
	}
	return name
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '_'
	}, s)
}

// createEventFile creates name in dir, or name.1, name.2, ... if it exists.
func createEventFile(dir, name string) (*os.File, error) {
	const attempts = 1000
	for i := range attempts {
		p := filepath.Join(dir, name)
		if i > 0 {
			p += "." + strconv.Itoa(i)
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("summary: create event file: %w", err)
		}
	}
	return nil, fmt.Errorf("summary: create event file %s in %s: %d names taken", name, dir, attempts)
}

// Path returns the path of the event file.
func (w *Writer) Path() string { return w.path }

// AddEvent appends e. A zero WallTime is set to the current time (on a
// copy: e is not modified).
func (w *Writer) AddEvent(e *pb.Event) error {
	if e.GetWallTime() == 0 {
		e = proto.CloneOf(e)
		e.WallTime = float64(w.now().UnixNano()) / 1e9
	}
	data, err := marshal.Marshal(e)
	if err != nil {
		return fmt.Errorf("summary: %s: encode event: %w", w.path, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usableLocked(); err != nil {
		return err
	}
	w.buf = AppendRecord(w.buf[:0], data)
	if _, err := w.bw.Write(w.buf); err != nil {
		w.err = fmt.Errorf("summary: %s: write: %w", w.path, err)
		return w.err
	}
	return nil
}

// AddScalar appends the scalar value of series tag at step. TensorBoard
// stores scalars as float32.
func (w *Writer) AddScalar(tag string, step int64, value float64) error {
	if tag == "" {
		return fmt.Errorf("summary: %s: scalar at step %d: %w", w.path, step, ErrEmptyTag)
	}
	return w.AddEvent(&pb.Event{Step: step, What: &pb.Event_Summary{Summary: scalarSummary(tag, value)}})
}

// AddHistogram appends the histogram of values (see NewHistogram) as series
// tag at step.
func (w *Writer) AddHistogram(tag string, step int64, values []float64) error {
	if tag == "" {
		return fmt.Errorf("summary: %s: histogram at step %d: %w", w.path, step, ErrEmptyTag)
	}
	h, err := NewHistogram(values)
	if err != nil {
		return fmt.Errorf("summary: %s: histogram %q at step %d: %w", w.path, tag, step, err)
	}
	return w.AddEvent(&pb.Event{Step: step, What: &pb.Event_Summary{Summary: histogramSummary(tag, h)}})
}

// AddSummary appends a serialised Summary proto, such as the output of the
// graph's summary ops (ops.ScalarSummary, ops.MergeAllSummaries) fetched as a
// uint8 tensor, at step. Bytes that do not parse are an error wrapping
// ErrBadSummary.
func (w *Writer) AddSummary(serialised []byte, step int64) error {
	s, err := decodeSummary(serialised)
	if err != nil {
		return fmt.Errorf("summary: %s: summary at step %d: %w", w.path, step, err)
	}
	return w.AddEvent(&pb.Event{Step: step, What: &pb.Event_Summary{Summary: s}})
}

// AddSessionLog appends a session status marker at step. A START written
// by a task that resumed from a checkpoint at step tells TensorBoard to
// discard the events of later steps written before the restart.
func (w *Writer) AddSessionLog(step int64, status pb.SessionLog_SessionStatus, msg string) error {
	return w.AddEvent(&pb.Event{Step: step, What: &pb.Event_SessionLog{SessionLog: &pb.SessionLog{Status: status, Msg: msg}}})
}

// Flush writes the buffered events to the file and syncs it to disk.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usableLocked(); err != nil {
		return err
	}
	return w.flushLocked()
}

func (w *Writer) usableLocked() error {
	if w.closed {
		return ErrClosed
	}
	return w.err
}

func (w *Writer) flushLocked() error {
	if err := w.bw.Flush(); err != nil {
		w.err = fmt.Errorf("summary: %s: flush: %w", w.path, err)
		return w.err
	}
	if err := w.f.Sync(); err != nil {
		w.err = fmt.Errorf("summary: %s: sync: %w", w.path, err)
		return w.err
	}
	return nil
}

// Close flushes the buffered events and closes the file. Later calls to
// Close return nil; the other methods return ErrClosed.
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.mu.Unlock()
	if w.stop != nil {
		close(w.stop)
		<-w.done
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.err
	if err == nil {
		err = w.flushLocked()
	}
	if cerr := w.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("summary: %s: close: %w", w.path, cerr)
	}
	return err
}

func (w *Writer) flushEvery(interval time.Duration) {
	defer close(w.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			w.mu.Lock()
			var err error
			if !w.closed && w.err == nil && w.bw.Buffered() > 0 {
				err = w.flushLocked()
			}
			w.mu.Unlock()
			if err != nil {
				w.logger.Error("summary: background flush failed", "file", w.path, "err", err)
			}
		}
	}
}
