package device

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// hostMemory hands out addresses without memory behind them: enough for
// the allocator, which never touches what it allocates.
type hostMemory struct {
	next     Ptr
	reserved map[Ptr]int64
	total    int64
}

func (m *hostMemory) Reserve(n int64) (Ptr, error) {
	var held int64
	for _, s := range m.reserved {
		held += s
	}
	if held+n > m.total {
		return 0, ErrOutOfMemory
	}
	if m.next == 0 {
		m.next = 1 << 32
	}
	p := m.next
	m.next = m.next.Add(n + Alignment)
	m.reserved[p] = n
	return p, nil
}

func (m *hostMemory) Release(p Ptr) error {
	if _, ok := m.reserved[p]; !ok {
		return errors.New("not reserved")
	}
	delete(m.reserved, p)
	return nil
}

func (m *hostMemory) Info() (int64, int64, error) { return 0, m.total, nil }

// TestAllocatorRandom allocates and frees at random and checks, after every
// operation, that live buffers never overlap, that the counters add up and
// that the limit holds; then that everything frees back into whole regions.
func TestAllocatorRandom(t *testing.T) {
	const limit = 32 << 20
	mem := &hostMemory{reserved: map[Ptr]int64{}, total: 1 << 30}
	a := NewAllocator("GPU:0", mem, limit)
	r := rand.New(rand.NewPCG(3, 4))
	live := map[Ptr]Buffer{}
	var inUse int64
	for i := range 20000 {
		if len(live) > 0 && r.IntN(2) == 0 {
			for p, b := range live {
				if err := a.Free(b); err != nil {
					t.Fatalf("op %d: Free: %v", i, err)
				}
				delete(live, p)
				inUse -= b.Size
				break
			}
		} else {
			n := int64(r.IntN(1 << (8 + r.IntN(14))))
			b, err := a.Alloc(n)
			if errors.Is(err, ErrOutOfMemory) {
				if inUse+roundUp(max(n, 1)) <= limit/2 {
					t.Fatalf("op %d: Alloc(%d) out of memory with only %d of %d in use: %v", i, n, inUse, limit, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("op %d: Alloc(%d): %v", i, n, err)
			}
			for _, o := range live {
				if b.Ptr < o.Ptr.Add(o.Size) && o.Ptr < b.Ptr.Add(b.Size) {
					t.Fatalf("op %d: Alloc(%d) = %+v overlaps %+v", i, n, b, o)
				}
			}
			live[b.Ptr] = b
			inUse += b.Size
		}
		st := a.Stats()
		if st.InUse != inUse || st.Live != int64(len(live)) || st.Reserved > limit || st.InUse > st.Reserved {
			t.Fatalf("op %d: Stats() = %+v, want %d bytes in %d live allocations within %d reserved and the limit %d",
				i, st, inUse, len(live), st.Reserved, limit)
		}
	}
	for _, b := range live {
		a.Free(b)
	}
	if got := a.Stats(); len(a.free) != len(a.regions) || got.InUse != 0 {
		t.Errorf("after freeing everything: %d free blocks in %d regions, %d bytes in use: want one block a region", len(a.free), len(a.regions), got.InUse)
	}
	if err := a.Close(); err != nil || len(mem.reserved) != 0 {
		t.Errorf("Close: %v, %d regions still reserved", err, len(mem.reserved))
	}
	if _, err := a.Alloc(1); !errors.Is(err, ErrClosed) {
		t.Errorf("Alloc after Close: %v, want ErrClosed", err)
	}
}
