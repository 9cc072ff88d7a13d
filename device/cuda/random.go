package cuda

import (
	"fmt"
	"sync"

	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/tensor"
)

// randomKernel is RandomUniform's kernel: the Philox stream of
// device.PhiloxUniform, with the node's count of runs in eight bytes of
// device memory that random_uniform_f32 reads and philox_advance, queued
// after it, increments (kernels/random.cu). Captured into a graph, both
// replay, so each replay draws the next run's numbers.
type randomKernel struct {
	node      *graph.Node
	key, base uint64

	mu    sync.Mutex
	dev   device.Device // the device the count lives on, from the first launch
	state device.Buffer
	ready bool    // the count has been zeroed
	zero  [8]byte // the count's first value, copied in
}

func newRandom(n *graph.Node) (device.Kernel, error) {
	if n.Op() != "RandomUniform" {
		return nil, fmt.Errorf("cuda: node %s: no kernel for %s", n, n.Op())
	}
	key, base := device.RandomSeeds(n)
	return &randomKernel{node: n, key: key, base: base}, nil
}

// Launch enqueues one run. The first launch allocates and zeroes the
// count: outside a capture, since the zeroing must not be replayed (a
// capture then fails with device.ErrNotCapturable, and the launch after
// it, eager, starts the count).
func (k *randomKernel) Launch(c *device.Context) error {
	l, err := launcherOf(c)
	if err != nil {
		return err
	}
	out := c.Outputs[0]
	if out.DType != tensor.Float32 {
		return unsupported("output", out.DType, f32)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dev == nil {
		buf, err := l.Allocator().Alloc(8)
		if err != nil {
			return err
		}
		k.dev, k.state = l, buf
	} else if k.dev != c.Device {
		return fmt.Errorf("a random kernel of %s launched on %s", k.dev.Info().Name, c.Device.Info().Name)
	}
	if !k.ready {
		if err := l.Stream().CopyIn(k.state.Ptr, k.zero[:]); err != nil {
			return err
		}
		k.ready = true
	}
	if n := n64(out); n > 0 {
		if err := l.launch("random_uniform_f32", grid1((n+3)/4), block1, out.Buf.Ptr, n, int64(k.key), int64(k.base), k.state.Ptr); err != nil {
			return err
		}
	}
	return l.launch("philox_advance", [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, k.state.Ptr)
}

// Release frees the count (device.Releaser).
func (k *randomKernel) Release() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dev == nil {
		return nil
	}
	err := k.dev.Allocator().Free(k.state)
	k.dev, k.state, k.ready = nil, device.Buffer{}, false
	return err
}
