package device

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
)

// Sentinel errors callers test with errors.Is.
var (
	// ErrOutOfMemory: an allocation does not fit in what is left of the
	// device's memory limit.
	ErrOutOfMemory = errors.New("device out of memory")
	// ErrUnavailable: the platform cannot run here (no GPU, no driver
	// library); the error names what was not found.
	ErrUnavailable = errors.New("accelerator unavailable")
	// ErrNoPlatform: no platform of that name is registered.
	ErrNoPlatform = errors.New("no such accelerator platform")
	// ErrNoKernel: an op has no kernel on a platform.
	ErrNoKernel = errors.New("no device kernel")
	// ErrClosed: the device was closed.
	ErrClosed = errors.New("device closed")
)

// Ptr is an address in a device's memory space. Go code never dereferences
// one; it is handed to copies and kernels. Zero is no address.
type Ptr uint64

// Add returns p advanced by n bytes.
func (p Ptr) Add(n int64) Ptr { return p + Ptr(n) }

// Memory is a platform's raw device memory for one device: few, large,
// slow allocations, which Allocator caches. Implementations are safe for
// concurrent use.
type Memory interface {
	// Reserve allocates n bytes of device memory, aligned to at least
	// Alignment bytes.
	Reserve(n int64) (Ptr, error)
	// Release frees memory returned by Reserve.
	Release(p Ptr) error
	// Info returns the device's free and total bytes as the platform
	// sees them.
	Info() (free, total int64, err error)
}

// Stream is an ordered queue of work on a device. Every method but
// Synchronize enqueues and returns at once; Stream methods are safe for
// concurrent use, and work is run in the order it was enqueued.
type Stream interface {
	// CopyIn enqueues a copy of src (host memory) to dst. src must stay
	// live and unchanged until the stream has passed the copy.
	CopyIn(dst Ptr, src []byte) error
	// CopyOut enqueues a copy of n = len(dst) bytes at src into dst (host
	// memory), which must stay live and unread until Synchronize returns.
	CopyOut(dst []byte, src Ptr) error
	// Copy enqueues a copy of n bytes within the device.
	Copy(dst, src Ptr, n int64) error
	// Zero enqueues the zeroing of n bytes at dst.
	Zero(dst Ptr, n int64) error
	// Synchronize waits until all work enqueued before it is done and
	// returns the first error of that work (a stream that failed stays
	// failed), or ctx's error if ctx ends first; the queued work then
	// goes on.
	Synchronize(ctx context.Context) error
}

// Info describes a device for listings and metrics.
type Info struct {
	// Name is the device's local name: "GPU:0".
	Name string
	// Platform is the name of its platform: "cuda" or "sim".
	Platform string
	// Model is the card's name ("NVIDIA H200") or the simulator's.
	Model string
	// Physical is the ordinal of the card it lives on (logical devices
	// share one), after CUDA_VISIBLE_DEVICES; Logical is its ordinal among
	// the machine's logical devices (Options.First onward: which share of
	// which card, where processes share the cards).
	Physical, Logical int
	// TotalBytes is the card's memory; LimitBytes what this device may use.
	TotalBytes, LimitBytes int64
	// Capability is the compute capability ("9.0") where there is one.
	Capability string
}

// Device is one accelerator as the runtime uses it: a physical card, or a
// logical share of one.
type Device interface {
	// Info describes the device.
	Info() Info
	// Allocator serves the device's memory.
	Allocator() *Allocator
	// Stream is the device's compute stream: its kernels and copies.
	Stream() Stream
	// Close synchronizes the stream and frees the device's memory. The
	// device must not be used afterwards.
	Close() error
}

// Options configures the devices a platform opens.
type Options struct {
	// Count is the number of devices to open: 0 opens one per visible
	// card. With Logical > 1 it counts logical devices.
	Count int
	// First is the machine's logical device to open first, counting the
	// cards' logical devices in order (0: the first): processes that share
	// the cards, as the workers of a local cluster, each open their own.
	// The devices opened are named GPU:0 onward in the process all the
	// same.
	First int
	// Logical splits each card into this many logical devices, each with an
	// equal share of the card's memory limit (TensorFlow's logical device
	// configuration): towers and several workers on one card. 0 or 1: one
	// device per card.
	Logical int
	// MemoryLimit caps the bytes each device's allocator may hold (0: no
	// cap beyond MemoryFraction).
	MemoryLimit int64
	// MemoryFraction is the share of each card's total memory the devices
	// on it may hold together (TensorFlow's per_process_gpu_memory_fraction);
	// 0 means 0.9.
	MemoryFraction float64
	// AllowTF32 lets float32 products and convolutions run on TF32 tensor
	// cores where the platform has them (cuBLAS's math mode on CUDA):
	// several times faster on Ampere and later, with inputs rounded to 10
	// bits of mantissa, so results are no longer within the conformance
	// suite's tolerance of the CPU's. Off by default, for exactness, as
	// PyTorch's torch.backends.cuda.matmul.allow_tf32; on CUDA the
	// environment's DISTFLOW_CUDA_TF32=1 turns it on as well.
	AllowTF32 bool
}

// Validate checks o.
func (o Options) Validate() error {
	switch {
	case o.Count < 0:
		return fmt.Errorf("device: Options.Count %d is negative", o.Count)
	case o.Logical < 0:
		return fmt.Errorf("device: Options.Logical %d is negative", o.Logical)
	case o.First < 0:
		return fmt.Errorf("device: Options.First %d is negative", o.First)
	case o.MemoryLimit < 0:
		return fmt.Errorf("device: Options.MemoryLimit %d is negative", o.MemoryLimit)
	case o.MemoryFraction < 0 || o.MemoryFraction > 1:
		return fmt.Errorf("device: Options.MemoryFraction %g is not in [0, 1]", o.MemoryFraction)
	}
	return nil
}

// Limit returns the bytes one of n logical devices of a card of total
// bytes may hold under o.
func (o Options) Limit(total int64, n int) int64 {
	frac := o.MemoryFraction
	if frac == 0 {
		frac = 0.9
	}
	if n < 1 {
		n = 1
	}
	limit := int64(float64(total)*frac) / int64(n)
	if o.MemoryLimit > 0 && o.MemoryLimit < limit {
		limit = o.MemoryLimit
	}
	return limit &^ (Alignment - 1)
}

// Platform is a kind of accelerator.
type Platform interface {
	// Name is the platform's registered name.
	Name() string
	// Probe reports whether the platform can run here and how many cards
	// it sees; its error wraps ErrUnavailable and names what is missing.
	Probe() (cards int, err error)
	// Open opens devices as opts says. Their names are "GPU:0" onward.
	Open(opts Options) ([]Device, error)
}

var (
	platformsMu sync.RWMutex
	platforms   = map[string]Platform{}
)

// RegisterPlatform makes p known by its name. It panics on a duplicate (a
// programmer error found at init).
func RegisterPlatform(p Platform) {
	platformsMu.Lock()
	defer platformsMu.Unlock()
	if _, dup := platforms[p.Name()]; dup {
		panic(fmt.Sprintf("device.RegisterPlatform: %q registered twice", p.Name()))
	}
	platforms[p.Name()] = p
}

// Lookup returns the platform registered as name.
func Lookup(name string) (Platform, error) {
	platformsMu.RLock()
	defer platformsMu.RUnlock()
	if p, ok := platforms[name]; ok {
		return p, nil
	}
	return nil, fmt.Errorf("device: %w %q (registered: %v)", ErrNoPlatform, name, platformNamesLocked())
}

// Platforms returns the registered platform names, sorted.
func Platforms() []string {
	platformsMu.RLock()
	defer platformsMu.RUnlock()
	return platformNamesLocked()
}

func platformNamesLocked() []string {
	names := make([]string, 0, len(platforms))
	for n := range platforms {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ErrNotCapturable is wrapped by the error of work that a capturing stream
// cannot record (a copy from or to host memory, a Synchronize).
var ErrNotCapturable = errors.New("work cannot be captured")

// Capturer is a Stream that can record the work enqueued on it, instead
// of running it, into a Graph that replays it at the cost of one launch:
// CUDA graphs' stream capture. While it captures, only device work (kernels,
// copies and zeroing within the device) may be enqueued; anything else
// fails with ErrNotCapturable, and EndCapture then fails too.
type Capturer interface {
	Stream
	// BeginCapture starts recording.
	BeginCapture() error
	// EndCapture stops recording and returns what was recorded.
	EndCapture() (Graph, error)
}

// Graph is recorded device work.
type Graph interface {
	// Launch enqueues one replay of the work on the stream it was
	// captured on, reading and writing the same device memory.
	Launch() error
	// Close frees the graph (not the memory it reads and writes).
	Close() error
}
