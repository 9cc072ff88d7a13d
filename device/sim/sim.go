package sim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"

	"github.com/distflow/distflow/device"
)

// Name is the platform's registered name.
const Name = "sim"

// Config sizes a simulated platform.
type Config struct {
	// Cards is the number of simulated cards (0: 2).
	Cards int
	// CardBytes is each card's memory (0: 1 GiB).
	CardBytes int64
}

// Platform is a simulated accelerator platform (device.Platform).
type Platform struct{ cfg Config }

// New returns a platform of cfg's cards, not registered.
func New(cfg Config) *Platform {
	if cfg.Cards <= 0 {
		cfg.Cards = 2
	}
	if cfg.CardBytes <= 0 {
		cfg.CardBytes = 1 << 30
	}
	return &Platform{cfg: cfg}
}

func init() {
	cfg := Config{}
	if v, err := strconv.Atoi(os.Getenv("DISTFLOW_SIM_GPUS")); err == nil && v > 0 {
		cfg.Cards = v
	}
	if v, err := strconv.ParseInt(os.Getenv("DISTFLOW_SIM_GPU_MEMORY"), 10, 64); err == nil && v > 0 {
		cfg.CardBytes = v
	}
	device.RegisterPlatform(New(cfg))
	registerKernels()
}

// Name returns "sim".
func (p *Platform) Name() string { return Name }

// Probe returns the number of simulated cards; the simulator is always
// available.
func (p *Platform) Probe() (int, error) { return p.cfg.Cards, nil }

// Open opens the devices opts asks for: opts.Count devices (0: one per card,
// times opts.Logical), spread over the cards in order, each logical device
// with its share of its card's memory.
func (p *Platform) Open(opts device.Options) ([]device.Device, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	per := max(opts.Logical, 1)
	n := opts.Count
	if n == 0 {
		n = p.cfg.Cards*per - opts.First
	}
	if opts.First+n > p.cfg.Cards*per {
		return nil, fmt.Errorf("sim: devices %d to %d asked for, but %d cards of %d logical devices make %d: %w",
			opts.First, opts.First+n-1, p.cfg.Cards, per, p.cfg.Cards*per, device.ErrUnavailable)
	}
	cards := make([]*card, p.cfg.Cards)
	out := make([]device.Device, n)
	for i := range n {
		c := (opts.First + i) / per
		if cards[c] == nil {
			cards[c] = &card{total: p.cfg.CardBytes}
		}
		name := "GPU:" + strconv.Itoa(i)
		d := &Device{info: device.Info{
			Name: name, Platform: Name, Model: "simulated accelerator", Physical: c, Logical: opts.First + i,
			TotalBytes: p.cfg.CardBytes, LimitBytes: opts.Limit(p.cfg.CardBytes, per),
		}, mem: &memory{card: cards[c]}}
		d.alloc = device.NewAllocator(name, d.mem, d.info.LimitBytes)
		d.stream = newStream(d.mem)
		out[i] = d
	}
	return out, nil
}

// card is one simulated card's memory, shared by its logical devices.
type card struct {
	mu    sync.Mutex
	total int64
	used  int64
}

// Device is a simulated device (device.Device).
type Device struct {
	info   device.Info
	mem    *memory
	alloc  *device.Allocator
	stream *stream
}

// Info describes the device.
func (d *Device) Info() device.Info { return d.info }

// Allocator returns the device's allocator.
func (d *Device) Allocator() *device.Allocator { return d.alloc }

// Stream returns the device's stream.
func (d *Device) Stream() device.Stream { return d.stream }

// Close waits for the queued work, stops the stream and frees the memory.
func (d *Device) Close() error {
	err := d.stream.close()
	if aerr := d.alloc.Close(); err == nil {
		err = aerr
	}
	return err
}

// base is the first simulated device address: far from zero and from any
// Go address a confused caller might pass.
const base device.Ptr = 0x7e00_0000_0000

// memory is a device's memory space: regions of Go memory at simulated
// addresses (device.Memory).
type memory struct {
	card *card

	mu      sync.RWMutex
	regions []region // by address
	next    device.Ptr
}

type region struct {
	ptr  device.Ptr
	data []byte
}

// Reserve takes n bytes of the card.
func (m *memory) Reserve(n int64) (device.Ptr, error) {
	c := m.card
	c.mu.Lock()
	if c.used+n > c.total {
		free := c.total - c.used
		c.mu.Unlock()
		return 0, fmt.Errorf("sim: the card has %s free, %s asked for: %w", device.FormatBytes(free), device.FormatBytes(n), device.ErrOutOfMemory)
	}
	c.used += n
	c.mu.Unlock()
	data := make([]byte, n)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.next == 0 {
		m.next = base
	}
	p := m.next
	// A gap after each region, so that an overrun is not another region.
	m.next = p.Add((n + 2*device.Alignment - 1) &^ (device.Alignment - 1))
	m.regions = append(m.regions, region{ptr: p, data: data})
	return p, nil
}

// Release returns a region to the card.
func (m *memory) Release(p device.Ptr) error {
	m.mu.Lock()
	i := slices.IndexFunc(m.regions, func(r region) bool { return r.ptr == p })
	if i < 0 {
		m.mu.Unlock()
		return fmt.Errorf("sim: release of %#x, which is not a region", uint64(p))
	}
	n := int64(len(m.regions[i].data))
	m.regions = slices.Delete(m.regions, i, i+1)
	m.mu.Unlock()
	m.card.mu.Lock()
	m.card.used -= n
	m.card.mu.Unlock()
	return nil
}

// Info returns the card's free and total bytes.
func (m *memory) Info() (free, total int64, err error) {
	m.card.mu.Lock()
	defer m.card.mu.Unlock()
	return m.card.total - m.card.used, m.card.total, nil
}

var errBadAddress = errors.New("sim: device address out of bounds")

// bytes returns the n bytes of device memory at p. Only the stream's
// goroutine calls it: that is what makes the memory a device's.
func (m *memory) bytes(p device.Ptr, n int64) ([]byte, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	i, _ := slices.BinarySearchFunc(m.regions, p, func(r region, p device.Ptr) int {
		switch {
		case r.ptr.Add(int64(len(r.data))) <= p:
			return -1
		case r.ptr > p:
			return 1
		}
		return 0
	})
	if i == len(m.regions) || n < 0 {
		return nil, fmt.Errorf("%w: %d bytes at %#x", errBadAddress, n, uint64(p))
	}
	r := m.regions[i]
	off := int64(p - r.ptr)
	if off < 0 || off+n > int64(len(r.data)) {
		return nil, fmt.Errorf("%w: %d bytes at %#x", errBadAddress, n, uint64(p))
	}
	return r.data[off : off+n : off+n], nil
}

// stream runs queued work in order on a goroutine of its own
// (device.Stream).
type stream struct {
	mem  *memory
	work chan item
	done chan struct{}

	mu     sync.RWMutex // held to send on work (read) and to close it
	closed bool

	capMu     sync.Mutex
	capturing bool
	recorded  []func() error
	capErr    error // the first work refused while capturing

	errMu sync.Mutex
	err   error // the first error of queued work: sticky
	fault error // the first fault (device.ErrIndexOutOfRange) since the last Synchronize
}

// item is queued work, or a mark that Synchronize waits for.
type item struct {
	f    func() error
	mark chan struct{}
}

func newStream(mem *memory) *stream {
	s := &stream{mem: mem, work: make(chan item, 4096), done: make(chan struct{})}
	go s.run()
	return s
}

func (s *stream) run() {
	defer close(s.done)
	for it := range s.work {
		if it.mark != nil {
			close(it.mark)
			continue
		}
		if s.failed() != nil {
			continue // a failed stream runs nothing more, as CUDA's
		}
		if err := it.f(); err != nil {
			s.record(err)
		}
	}
}

// isFault reports whether err is a fault that a kernel found on the
// device and reported instead of doing its work (an index out of range,
// a CPU kernel's refusal of its inputs), which does not fail the stream,
// as on CUDA (device.SparseUpdates).
func isFault(err error) bool {
	var ke *kernelError
	return errors.Is(err, device.ErrIndexOutOfRange) || errors.As(err, &ke)
}

// kernelError is a CPU kernel's refusal of the values it was given (a
// label out of range, an integer division by zero): the data of a step,
// not the device, are wrong, so it fails the step that queued it at its
// Synchronize and the device serves the next one. Sticky, it failed every
// later step of every session on the device with it; CUDA's kernels give
// NaN or 0 there and go on.
type kernelError struct{ err error }

func (e *kernelError) Error() string { return e.err.Error() }
func (e *kernelError) Unwrap() error { return e.err }

// record keeps err: a fault until the next Synchronize, any other error
// for good.
func (s *stream) record(err error) {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	switch {
	case isFault(err):
		if s.fault == nil {
			s.fault = err
		}
	case s.err == nil:
		s.err = err
	}
}

// faulted reports whether a fault was recorded since the last Synchronize:
// the kernels that write variables then write nothing, as CUDA's.
func (s *stream) faulted() bool {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.fault != nil
}

// takeFault returns the fault recorded since the last call, and clears it.
func (s *stream) takeFault() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	err := s.fault
	s.fault = nil
	return err
}

func (s *stream) failed() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

// enqueue queues it, or returns the stream's error.
func (s *stream) enqueue(it item) error {
	if err := s.failed(); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return fmt.Errorf("sim: stream: %w", device.ErrClosed)
	}
	s.work <- it // the channel's room bounds how far the host runs ahead
	return nil
}

// launch queues f, which runs on the stream with access to device memory,
// or records it while the stream captures.
func (s *stream) launch(f func() error) error {
	s.capMu.Lock()
	if s.capturing {
		s.recorded = append(s.recorded, f)
		s.capMu.Unlock()
		return nil
	}
	s.capMu.Unlock()
	return s.enqueue(item{f: f})
}

// host queues a copy between host and device memory, which a capture
// cannot record: CUDA cannot capture copies from pageable host memory.
func (s *stream) host(what string, f func() error) error {
	s.capMu.Lock()
	if s.capturing {
		err := fmt.Errorf("sim: %s while the stream captures: %w", what, device.ErrNotCapturable)
		if s.capErr == nil {
			s.capErr = err
		}
		s.capMu.Unlock()
		return err
	}
	s.capMu.Unlock()
	return s.enqueue(item{f: f})
}

// BeginCapture starts recording the stream's work.
func (s *stream) BeginCapture() error {
	s.capMu.Lock()
	defer s.capMu.Unlock()
	if s.capturing {
		return fmt.Errorf("sim: BeginCapture: the stream already captures")
	}
	s.capturing, s.recorded, s.capErr = true, nil, nil
	return nil
}

// EndCapture returns the recorded work as a graph.
func (s *stream) EndCapture() (device.Graph, error) {
	s.capMu.Lock()
	defer s.capMu.Unlock()
	if !s.capturing {
		return nil, fmt.Errorf("sim: EndCapture without BeginCapture")
	}
	work, err := s.recorded, s.capErr
	s.capturing, s.recorded, s.capErr = false, nil, nil
	if err != nil {
		return nil, err
	}
	return &recording{s: s, work: work}, nil
}

// recording is recorded work, replayed as one item of the stream.
type recording struct {
	s    *stream
	work []func() error
}

func (g *recording) Launch() error {
	return g.s.launch(func() error {
		for _, f := range g.work {
			if err := f(); err != nil {
				if !isFault(err) {
					return err
				}
				g.s.record(err) // the replay goes on, as the stream would
			}
		}
		return nil
	})
}

func (g *recording) Close() error { g.work = nil; return nil }

func (s *stream) CopyIn(dst device.Ptr, src []byte) error {
	return s.host("a copy to the device", func() error {
		d, err := s.mem.bytes(dst, int64(len(src)))
		if err != nil {
			return fmt.Errorf("sim: copy to device: %w", err)
		}
		copy(d, src)
		return nil
	})
}

func (s *stream) CopyOut(dst []byte, src device.Ptr) error {
	return s.host("a copy to the host", func() error {
		d, err := s.mem.bytes(src, int64(len(dst)))
		if err != nil {
			return fmt.Errorf("sim: copy to host: %w", err)
		}
		copy(dst, d)
		return nil
	})
}

func (s *stream) Copy(dst, src device.Ptr, n int64) error {
	return s.launch(func() error {
		d, err := s.mem.bytes(dst, n)
		if err != nil {
			return fmt.Errorf("sim: copy on device: %w", err)
		}
		r, err := s.mem.bytes(src, n)
		if err != nil {
			return fmt.Errorf("sim: copy on device: %w", err)
		}
		copy(d, r)
		return nil
	})
}

func (s *stream) Zero(dst device.Ptr, n int64) error {
	return s.launch(func() error {
		d, err := s.mem.bytes(dst, n)
		if err != nil {
			return fmt.Errorf("sim: zero: %w", err)
		}
		clear(d)
		return nil
	})
}

// Synchronize waits for the work queued so far.
func (s *stream) Synchronize(ctx context.Context) error {
	s.capMu.Lock()
	if s.capturing {
		err := fmt.Errorf("sim: Synchronize while the stream captures: %w", device.ErrNotCapturable)
		if s.capErr == nil {
			s.capErr = err
		}
		s.capMu.Unlock()
		return err
	}
	s.capMu.Unlock()
	mark := make(chan struct{})
	if err := s.enqueue(item{mark: mark}); err != nil {
		return err
	}
	select {
	case <-mark:
	case <-ctx.Done():
		return fmt.Errorf("sim: synchronize: %w", ctx.Err())
	}
	if err := s.failed(); err != nil {
		return err
	}
	return s.takeFault()
}

// close waits for the queued work and stops the goroutine.
func (s *stream) close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.work)
	s.mu.Unlock()
	<-s.done
	return s.failed()
}
