package cuda

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/distflow/distflow/device"
)

// Device is a CUDA device (device.Device): a card, or a logical share of
// one, with its own stream and allocator.
type Device struct {
	info   device.Info
	card   *card
	mem    *memory
	alloc  *device.Allocator
	stream *stream
	faults faults // the kernels' faults found on the device (faults.go)

	blasMu   sync.Mutex
	blas     uintptr    // cuBLAS handle bound to the stream, made on first use
	blasWork device.Ptr // its workspace, outside the allocator (zero: none)
	noBlas   bool       // cuBLAS cannot be used: MatMul runs the own kernel
	tf32     bool       // cuBLAS may use TF32 tensor cores (device.Options.AllowTF32)

	closeOnce sync.Once
	closeErr  error
}

func newDevice(p *Platform, c *card, name string, logical int, limit int64, tf32 bool) (*Device, error) {
	d := &Device{card: c, tf32: tf32, info: device.Info{
		Name: name, Platform: Name, Model: c.info.name, Physical: c.ordinal, Logical: logical,
		TotalBytes: c.info.total, LimitBytes: limit,
		Capability: fmt.Sprintf("%d.%d", c.info.major, c.info.minor),
	}}
	d.mem = &memory{d: d}
	d.faults.mem = d.mem
	var h uintptr
	err := c.do(name, func() error {
		return c.drv.check(name, "cuStreamCreate", ccall(c.drv.cuStreamCreate, uintptr(unsafe.Pointer(&h)), cuStreamNonBlocking))
	})
	if err != nil {
		return nil, err
	}
	c.retain()
	d.stream = &stream{d: d, h: h}
	d.alloc = device.NewAllocator(name, d.mem, limit)
	return d, nil
}

// Info describes the device.
func (d *Device) Info() device.Info { return d.info }

// Allocator returns the device's allocator.
func (d *Device) Allocator() *device.Allocator { return d.alloc }

// Stream returns the device's stream.
func (d *Device) Stream() device.Stream { return d.stream }

// Close waits for the stream, frees the device's memory, its stream and
// cuBLAS handle, and releases the card when it is the last device on it.
func (d *Device) Close() error {
	d.closeOnce.Do(func() {
		c, name := d.card, d.info.Name
		err := d.stream.close()
		if aerr := d.alloc.Close(); err == nil {
			err = aerr
		}
		if ferr := d.faults.release(); err == nil {
			err = ferr
		}
		d.blasMu.Lock()
		if d.blas != 0 {
			if b, berr := c.p.cublas(); berr == nil {
				c.do(name, func() error { return b.check(name, "cublasDestroy_v2", ccall(b.cublasDestroy, d.blas)) })
			}
			d.blas = 0
		}
		if d.blasWork != 0 {
			if werr := d.mem.Release(d.blasWork); err == nil {
				err = werr
			}
			d.blasWork = 0
		}
		d.blasMu.Unlock()
		if serr := c.do(name, func() error {
			return c.drv.check(name, "cuStreamDestroy_v2", ccall(c.drv.cuStreamDestroy, d.stream.h))
		}); err == nil {
			err = serr
		}
		if rerr := c.release(); err == nil {
			err = rerr
		}
		d.closeErr = err
	})
	return d.closeErr
}

// cublasHandle returns the device's cuBLAS handle, or ok false if MatMul
// must run the platform's own kernel.
func (d *Device) cublasHandle() (b *cublas, h uintptr, ok bool) {
	d.blasMu.Lock()
	defer d.blasMu.Unlock()
	if d.noBlas {
		return nil, 0, false
	}
	b, err := d.card.p.cublas()
	if err == nil && d.blas == 0 {
		// The workspace comes from the driver, not the allocator: it
		// lives as long as the handle, as the fault record does, and a
		// step's memory statistics stay the model's.
		work := workspaceBytes(d.card.info.major, d.info.LimitBytes)
		if d.blasWork == 0 && work > 0 && b.cublasSetWorkspace != 0 {
			if d.blasWork, err = d.mem.Reserve(work); err != nil {
				slog.Warn("cuda: cuBLAS runs without a workspace of its own; a captured step may not replay", "device", d.info.Name, "err", err)
				d.blasWork, err = 0, nil
			}
		}
		err = d.card.do(d.info.Name, func() error {
			var herr error
			d.blas, herr = b.newHandle(d.info.Name, d.stream.h, d.tf32, d.blasWork, work)
			return herr
		})
	}
	if err != nil {
		if d.blasWork != 0 {
			d.mem.Release(d.blasWork)
			d.blasWork = 0
		}
		d.noBlas = true
		return nil, 0, false
	}
	return b, d.blas, true
}

// memory is a device's raw memory through cuMemAlloc (device.Memory).
type memory struct{ d *Device }

// Reserve allocates n bytes with cuMemAlloc (aligned to at least 256).
func (m *memory) Reserve(n int64) (device.Ptr, error) {
	var p uint64
	c, name := m.d.card, m.d.info.Name
	err := c.do(name, func() error {
		return c.drv.check(name, "cuMemAlloc_v2", ccall(c.drv.cuMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n)))
	})
	return device.Ptr(p), err
}

// Release frees memory from Reserve.
func (m *memory) Release(p device.Ptr) error {
	c, name := m.d.card, m.d.info.Name
	return c.do(name, func() error { return c.drv.check(name, "cuMemFree_v2", ccall(c.drv.cuMemFree, uintptr(p))) })
}

// Info returns the card's free and total bytes.
func (m *memory) Info() (free, total int64, err error) {
	var f, t uint64
	c, name := m.d.card, m.d.info.Name
	err = c.do(name, func() error {
		return c.drv.check(name, "cuMemGetInfo_v2", ccall(c.drv.cuMemGetInfo, uintptr(unsafe.Pointer(&f)), uintptr(unsafe.Pointer(&t))))
	})
	return int64(f), int64(t), err
}

// stream is a CUDA stream (device.Stream). Copies from host memory are
// staged by the driver before cuMemcpyHtoDAsync returns, and copies to
// pageable host memory complete before cuMemcpyDtoHAsync returns, so Go
// memory is never read or written by the GPU after a call has returned.
type stream struct {
	d *Device
	h uintptr

	mu     sync.Mutex
	err    error // the first error: sticky, as CUDA's are
	closed bool

	// While capturing, work is recorded into a CUDA graph rather than run;
	// capErr is the first error of the capture, which EndCapture returns
	// (the stream itself is not failed by it).
	capturing bool
	capErr    error
}

var errStreamClosed = fmt.Errorf("cuda: stream: %w", device.ErrClosed)

// enqueue runs one driver call f named call on the stream.
func (s *stream) enqueue(call string, f func() uintptr) error {
	c, name := s.d.card, s.d.info.Name
	return s.enqueueErr(func() error { return c.drv.check(name, call, f()) })
}

// enqueueErr runs a call sequence f that enqueues on the stream and reports
// its own error, which fails the stream, or the capture while it captures.
func (s *stream) enqueueErr(f func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if s.closed {
		return errStreamClosed
	}
	if s.capturing && s.capErr != nil {
		return s.capErr
	}
	err := s.d.card.do(s.d.info.Name, f)
	if err != nil {
		if s.capturing {
			s.capErr = err
		} else {
			s.err = err
		}
	}
	return err
}

// host enqueues a copy between host and device memory, which a capture
// cannot record (CUDA does not capture copies of pageable memory): while
// the stream captures it fails, and so does the capture.
func (s *stream) host(what, call string, f func() uintptr) error {
	s.mu.Lock()
	if s.capturing {
		err := fmt.Errorf("cuda: %s: %s while the stream captures: %w", s.d.info.Name, what, device.ErrNotCapturable)
		if s.capErr == nil {
			s.capErr = err
		}
		s.mu.Unlock()
		return err
	}
	s.mu.Unlock()
	return s.enqueue(call, f)
}

// fail records err as the stream's error if it has none.
func (s *stream) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
}

func (s *stream) CopyIn(dst device.Ptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	drv := s.d.card.drv
	return s.host("a copy to the device", "cuMemcpyHtoDAsync_v2", func() uintptr {
		return ccall(drv.cuMemcpyHtoDAsync, uintptr(dst), uintptr(unsafe.Pointer(&src[0])), uintptr(len(src)), s.h)
	})
}

func (s *stream) CopyOut(dst []byte, src device.Ptr) error {
	if len(dst) == 0 {
		return nil
	}
	drv := s.d.card.drv
	return s.host("a copy to the host", "cuMemcpyDtoHAsync_v2", func() uintptr {
		return ccall(drv.cuMemcpyDtoHAsync, uintptr(unsafe.Pointer(&dst[0])), uintptr(src), uintptr(len(dst)), s.h)
	})
}

func (s *stream) Copy(dst, src device.Ptr, n int64) error {
	if n <= 0 {
		return nil
	}
	drv := s.d.card.drv
	return s.enqueue("cuMemcpyDtoDAsync_v2", func() uintptr {
		return ccall(drv.cuMemcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(n), s.h)
	})
}

func (s *stream) Zero(dst device.Ptr, n int64) error {
	if n <= 0 {
		return nil
	}
	drv := s.d.card.drv
	return s.enqueue("cuMemsetD8Async", func() uintptr {
		return ccall(drv.cuMemsetD8Async, uintptr(dst), 0, uintptr(n), s.h)
	})
}

// spinFor is how long Synchronize polls without sleeping.
const spinFor = 50 * time.Microsecond

// Synchronize polls cuStreamQuery, at once for spinFor, then sleeping
// between polls from 5µs up to 1ms, so that ctx can end the wait: cuStreamSynchronize cannot be
// interrupted, and a goroutine blocked in it would outlive the caller.
func (s *stream) Synchronize(ctx context.Context) error {
	c, name := s.d.card, s.d.info.Name
	s.mu.Lock()
	err, closed := s.err, s.closed
	if err == nil && !closed && s.capturing {
		// Querying a capturing stream would invalidate the capture.
		err = fmt.Errorf("cuda: %s: Synchronize while the stream captures: %w", name, device.ErrNotCapturable)
		if s.capErr == nil {
			s.capErr = err
		}
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if closed {
		return errStreamClosed
	}
	wait := 5 * time.Microsecond
	var timer *time.Timer
	start := time.Now()
	for {
		var r cuResult
		err := c.do(name, func() error {
			r = result(ccall(c.drv.cuStreamQuery, s.h))
			if r == cudaSuccess || r == cudaErrorNotReady {
				return nil
			}
			return c.drv.check(name, "cuStreamQuery", uintptr(r))
		})
		if err != nil {
			s.fail(err)
			return s.failed()
		}
		if r == cudaSuccess {
			if err := s.failed(); err != nil {
				return err
			}
			return s.d.faults.check(s.readFault, s.Zero)
		}
		// A small model's step ends within tens of microseconds of its
		// last launch, sooner than a timer fires: poll at once for a
		// while, yielding the thread, before sleeping.
		if spun := time.Since(start); spun < spinFor {
			if ctx.Err() != nil {
				return fmt.Errorf("cuda: %s: synchronize: %w", name, ctx.Err())
			}
			runtime.Gosched()
			continue
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cuda: %s: synchronize: %w", name, ctx.Err())
		case <-timer.C:
		}
		wait = min(2*wait, time.Millisecond)
	}
}

// readFault copies the fault record to the host, done when it returns
// (pageable memory), the stream being idle.
func (s *stream) readFault(dst []byte, src device.Ptr) error {
	c, name := s.d.card, s.d.info.Name
	return c.do(name, func() error {
		return c.drv.check(name, "cuMemcpyDtoHAsync_v2", ccall(c.drv.cuMemcpyDtoHAsync, uintptr(unsafe.Pointer(&dst[0])), uintptr(src), uintptr(len(dst)), s.h))
	})
}

func (s *stream) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// BeginCapture starts recording the stream's work into a CUDA graph
// (device.Capturer).
func (s *stream) BeginCapture() error {
	c, name := s.d.card, s.d.info.Name
	if !c.drv.canCapture() {
		return fmt.Errorf("cuda: %s: BeginCapture: the driver (%s) has no CUDA graphs", name, c.drv.lib.path)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.err != nil:
		return s.err
	case s.closed:
		return errStreamClosed
	case s.capturing:
		return fmt.Errorf("cuda: %s: BeginCapture: the stream already captures", name)
	}
	err := c.do(name, func() error {
		return c.drv.check(name, "cuStreamBeginCapture_v2", ccall(c.drv.cuStreamBeginCapture, s.h, cuStreamCaptureModeRelaxed))
	})
	if err == nil {
		s.capturing, s.capErr = true, nil
	}
	return err
}

// EndCapture stops recording and instantiates the graph. After a failed
// capture the stream is as it was before BeginCapture.
func (s *stream) EndCapture() (device.Graph, error) {
	c, name := s.d.card, s.d.info.Name
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.capturing {
		return nil, fmt.Errorf("cuda: %s: EndCapture without BeginCapture", name)
	}
	capErr := s.capErr
	s.capturing, s.capErr = false, nil
	var exec uintptr
	err := c.do(name, func() error {
		var graph uintptr
		err := c.drv.check(name, "cuStreamEndCapture", ccall(c.drv.cuStreamEndCapture, s.h, uintptr(unsafe.Pointer(&graph))))
		if err == nil && capErr == nil {
			err = c.drv.check(name, "cuGraphInstantiateWithFlags", ccall(c.drv.cuGraphInstantiate, uintptr(unsafe.Pointer(&exec)), graph, cudaGraphInstantiateFlagAutoFreeOnLaunch))
		}
		if graph != 0 {
			ccall(c.drv.cuGraphDestroy, graph) // the executable graph is independent of it
		}
		return err
	})
	if capErr != nil {
		err = capErr
	}
	if err != nil {
		if exec != 0 {
			c.do(name, func() error { ccall(c.drv.cuGraphExecDestroy, exec); return nil })
		}
		return nil, err
	}
	return &cudaGraph{s: s, exec: exec}, nil
}

// cudaGraph is an instantiated CUDA graph of a stream's captured work
// (device.Graph).
type cudaGraph struct {
	s    *stream
	mu   sync.Mutex
	exec uintptr // zero once closed
}

// Launch enqueues one replay of the graph on its stream.
func (g *cudaGraph) Launch() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.exec == 0 {
		return fmt.Errorf("cuda: %s: launch of a closed graph", g.s.d.info.Name)
	}
	drv := g.s.d.card.drv
	return g.s.enqueue("cuGraphLaunch", func() uintptr { return ccall(drv.cuGraphLaunch, g.exec, g.s.h) })
}

// Close destroys the graph; replays already enqueued still run.
func (g *cudaGraph) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.exec == 0 {
		return nil
	}
	c, name := g.s.d.card, g.s.d.info.Name
	exec := g.exec
	g.exec = 0
	return c.do(name, func() error { return c.drv.check(name, "cuGraphExecDestroy", ccall(c.drv.cuGraphExecDestroy, exec)) })
}

// close waits for the queued work and stops further enqueueing.
func (s *stream) close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	c, name := s.d.card, s.d.info.Name
	err := c.do(name, func() error {
		return c.drv.check(name, "cuStreamSynchronize", ccall(c.drv.cuStreamSynchronize, s.h))
	})
	if err != nil {
		s.fail(err)
	}
	return s.failed()
}

// asError is errors.As for *Error.
func asError(err error, target **Error) bool { return err != nil && errors.As(err, target) }

var _ device.Capturer = (*stream)(nil)
