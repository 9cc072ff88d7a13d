package device

import (
	"fmt"
	"slices"
	"sync"
)

// Alignment is the alignment of every allocation, in bytes: enough for
// any vector load of a kernel, as cudaMalloc's 256.
const Alignment = 256

// minRegion is the smallest region the allocator reserves: small enough
// for the simulated device's tests, large enough that a model's first step
// does not reserve once per tensor.
const minRegion = 1 << 20

// Buffer is an allocation of device memory: Size bytes (the request rounded
// up to Alignment) at Ptr. The zero Buffer is no allocation.
type Buffer struct {
	Ptr  Ptr
	Size int64
}

// Stats are an allocator's counters, in bytes unless said otherwise.
type Stats struct {
	// InUse is the bytes of live allocations; Peak the most it has been.
	InUse, Peak int64
	// Reserved is the bytes held from the platform; Limit the most it may.
	Reserved, Limit int64
	// LargestFree is the largest allocation that would succeed without
	// reserving more.
	LargestFree int64
	// Allocs counts allocations, Live the live ones.
	Allocs, Live int64
}

// Allocator is a best-fit caching allocator with coalescing over a device's
// Memory, after TensorFlow's BFC allocator (see the package doc). It is
// safe for concurrent use.
type Allocator struct {
	name  string
	mem   Memory
	limit int64

	mu      sync.Mutex
	regions []region       // reserved from mem, in order
	next    int64          // size of the next region to reserve
	free    []*chunk       // free chunks by (size, ptr)
	used    map[Ptr]*chunk // live allocations by address
	stats   Stats
	closed  bool
}

type region struct {
	ptr  Ptr
	size int64
}

// chunk is a piece of a region, free or allocated, linked to its
// neighbours in address order so that frees coalesce.
type chunk struct {
	ptr        Ptr
	size       int64
	inUse      bool
	prev, next *chunk
}

// NewAllocator returns an allocator of at most limit bytes over mem, for
// the device called name (in errors).
func NewAllocator(name string, mem Memory, limit int64) *Allocator {
	return &Allocator{name: name, mem: mem, limit: limit, next: minRegion, used: map[Ptr]*chunk{},
		stats: Stats{Limit: limit}}
}

// Alloc returns n bytes of device memory (n rounded up to Alignment; n = 0
// gives one aligned unit, so that every buffer has an address). The memory
// is not zeroed. An allocation that the limit cannot hold fails with an
// error wrapping ErrOutOfMemory that names the device and the bytes asked
// for and free.
func (a *Allocator) Alloc(n int64) (Buffer, error) {
	if n < 0 {
		return Buffer{}, fmt.Errorf("device: %s: allocation of %d bytes", a.name, n)
	}
	size := roundUp(max(n, 1))
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return Buffer{}, fmt.Errorf("device: %s: %w", a.name, ErrClosed)
	}
	c := a.bestFitLocked(size)
	if c == nil {
		var err error
		if c, err = a.growLocked(size); err != nil {
			return Buffer{}, err
		}
	}
	a.removeFreeLocked(c)
	if rest := c.size - size; rest >= Alignment {
		r := &chunk{ptr: c.ptr.Add(size), size: rest, prev: c, next: c.next}
		if c.next != nil {
			c.next.prev = r
		}
		c.next, c.size = r, size
		a.insertFreeLocked(r)
	}
	c.inUse = true
	a.used[c.ptr] = c
	a.stats.InUse += c.size
	a.stats.Peak = max(a.stats.Peak, a.stats.InUse)
	a.stats.Allocs++
	a.stats.Live++
	return Buffer{Ptr: c.ptr, Size: c.size}, nil
}

// Free returns b to the allocator. Freeing a buffer twice, or one it did
// not allocate, is an error.
func (a *Allocator) Free(b Buffer) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.used[b.Ptr]
	if !ok || b.Ptr == 0 {
		return fmt.Errorf("device: %s: free of %#x, which is not a live allocation", a.name, uint64(b.Ptr))
	}
	delete(a.used, b.Ptr)
	c.inUse = false
	a.stats.InUse -= c.size
	a.stats.Live--
	if p := c.prev; p != nil && !p.inUse {
		a.removeFreeLocked(p)
		p.size += c.size
		p.next = c.next
		if c.next != nil {
			c.next.prev = p
		}
		c = p
	}
	if nx := c.next; nx != nil && !nx.inUse {
		a.removeFreeLocked(nx)
		c.size += nx.size
		c.next = nx.next
		if nx.next != nil {
			nx.next.prev = c
		}
	}
	a.insertFreeLocked(c)
	return nil
}

// Stats returns the allocator's counters.
func (a *Allocator) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.stats
	if n := len(a.free); n > 0 {
		s.LargestFree = a.free[n-1].size
	}
	return s
}

// Close releases every region to the platform; allocations still live are
// lost, and later Allocs fail.
func (a *Allocator) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	var first error
	for _, r := range a.regions {
		if err := a.mem.Release(r.ptr); err != nil && first == nil {
			first = fmt.Errorf("device: %s: releasing memory: %w", a.name, err)
		}
	}
	a.regions, a.free, a.used = nil, nil, map[Ptr]*chunk{}
	a.stats.Reserved, a.stats.InUse, a.stats.Live = 0, 0, 0
	return first
}

// growLocked reserves a region that can hold size bytes and returns it as
// one free chunk, or fails with ErrOutOfMemory. When the limit leaves no
// room, the regions that are wholly free are released first, so that
// memory freed in small regions can serve a larger block.
func (a *Allocator) growLocked(size int64) (*chunk, error) {
	room := a.limit - a.stats.Reserved
	if size > room {
		a.releaseFreeRegionsLocked()
		room = a.limit - a.stats.Reserved
	}
	if size > room {
		return nil, a.oomLocked(size, nil)
	}
	// Regions double, so that a model reserves O(log) times, but never
	// past the limit nor below the request.
	want := min(max(a.next, size), room)
	p, err := a.mem.Reserve(want)
	if err != nil && want > size {
		want = size
		p, err = a.mem.Reserve(want)
	}
	if err != nil {
		return nil, a.oomLocked(size, err)
	}
	a.regions = append(a.regions, region{p, want})
	a.stats.Reserved += want
	a.next = want * 2
	c := &chunk{ptr: p, size: want}
	a.insertFreeLocked(c)
	return c, nil
}

// releaseFreeRegionsLocked gives back to the platform every region that
// is one free chunk.
func (a *Allocator) releaseFreeRegionsLocked() {
	var keep []region
	for _, r := range a.regions {
		i, ok := slices.BinarySearchFunc(a.free, &chunk{ptr: r.ptr, size: r.size}, freeOrder)
		if !ok || a.mem.Release(r.ptr) != nil {
			keep = append(keep, r)
			continue
		}
		a.free = slices.Delete(a.free, i, i+1)
		a.stats.Reserved -= r.size
	}
	a.regions = keep
	a.next = minRegion
}

func (a *Allocator) oomLocked(size int64, cause error) error {
	largest := int64(0)
	if n := len(a.free); n > 0 {
		largest = a.free[n-1].size
	}
	free := a.limit - a.stats.InUse
	msg := fmt.Sprintf("device: %s: %v: asked for %s, %s free of a %s limit (largest free block %s; %s in use by %d allocations)",
		a.name, ErrOutOfMemory, FormatBytes(size), FormatBytes(free), FormatBytes(a.limit), FormatBytes(largest),
		FormatBytes(a.stats.InUse), a.stats.Live)
	if cause != nil {
		return &oomError{msg: msg + ": " + cause.Error(), cause: cause}
	}
	return &oomError{msg: msg}
}

type oomError struct {
	msg   string
	cause error
}

func (e *oomError) Error() string   { return e.msg }
func (e *oomError) Unwrap() []error { return []error{ErrOutOfMemory, e.cause} }

// bestFitLocked returns the smallest free chunk of at least size bytes
// (the lowest address among equals), or nil.
func (a *Allocator) bestFitLocked(size int64) *chunk {
	i, _ := slices.BinarySearchFunc(a.free, size, func(c *chunk, size int64) int {
		if c.size < size {
			return -1
		}
		return 1
	})
	if i == len(a.free) {
		return nil
	}
	return a.free[i]
}

func freeOrder(x, y *chunk) int {
	switch {
	case x.size != y.size:
		if x.size < y.size {
			return -1
		}
		return 1
	case x.ptr < y.ptr:
		return -1
	case x.ptr > y.ptr:
		return 1
	}
	return 0
}

func (a *Allocator) insertFreeLocked(c *chunk) {
	i, _ := slices.BinarySearchFunc(a.free, c, freeOrder)
	a.free = slices.Insert(a.free, i, c)
}

func (a *Allocator) removeFreeLocked(c *chunk) {
	if i, ok := slices.BinarySearchFunc(a.free, c, freeOrder); ok {
		a.free = slices.Delete(a.free, i, i+1)
	}
}

func roundUp(n int64) int64 { return (n + Alignment - 1) &^ (Alignment - 1) }

// FormatBytes prints n in binary units: "1.5 GiB".
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n)/unit, 0
	for ; (f >= unit || f <= -unit) && i < 4; i++ {
		f /= unit
	}
	return fmt.Sprintf("%.1f %ciB", f, "KMGTP"[i])
}
