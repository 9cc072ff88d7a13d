package cpu

import (
	"math"
	"sync"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/internal/topk"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/tensor"
)

// Kernels of gradient compression (op/compress.go).

func init() {
	kernel.Register("TopKCompress", kernel.CPU, kernel.Borrowing(func(*graph.Node) (kernel.Kernel, error) {
		return &compressTopK{}, nil
	}))
}

// compressTopK is the kernel of one TopKCompress node: it owns the node's
// residual, made at the first step and kept for the executor's life. Steps
// of one executor may run concurrently; they take turns under mu, each
// seeing the residual the previous one left.
type compressTopK struct {
	mu       sync.Mutex
	residual []float32 // what was not sent yet; nil before the first step
	idx      []int32   // scratch: the selection
	sel      topk.Selector
}

func (k *compressTopK) Compute(c *kernel.Context) error {
	g, r := c.Input(0), c.Input(1)
	if g.DType() != tensor.Float32 {
		return c.Errorf("gradient must be float32, got %v", g.DType())
	}
	if r.DType() != tensor.Float32 || r.Rank() != 0 {
		return c.Errorf("ratio must be a float32 scalar, got %v%v", r.DType(), r.StaticShape())
	}
	ratio := r.Float32s()[0]
	if !(ratio > 0 && ratio <= 1) {
		return c.Errorf("ratio %v: want 0 < ratio <= 1 (the share of the gradient's elements sent)", ratio)
	}
	grad := g.Float32s()
	n := len(grad)
	if n > math.MaxInt32 {
		return c.Errorf("gradient %v has %d elements, more than int32 indices address", g.StaticShape(), n)
	}

	k.mu.Lock()
	defer k.mu.Unlock()
	if k.residual == nil {
		k.residual = make([]float32, n)
	}
	res := k.residual
	if len(res) != n {
		return c.Errorf("gradient %v has %d elements, the residual of the earlier steps %d: a TopKCompress node takes gradients of one size",
			g.StaticShape(), n, len(res))
	}
	// Check before adding, so that a bad step leaves the residual as it
	// was: a NaN or Inf kept there would poison every later step.
	for i, x := range grad {
		if s := res[i] + x; s-s != 0 {
			if x-x != 0 {
				return c.Errorf("gradient[%d] (flattened, of %v) is %v: refusing a non-finite gradient", i, g.StaticShape(), x)
			}
			return c.Errorf("residual[%d] + gradient[%d] = %v + %v overflows float32", i, i, res[i], x)
		}
	}
	for i, x := range grad {
		res[i] += x
	}
	k.idx = k.sel.Select(k.idx, res, topk.Count(float64(ratio), n))
	indices := c.AllocUninit(0, tensor.Int32, len(k.idx)).Int32s()
	values := c.AllocUninit(1, tensor.Float32, len(k.idx)).Float32s()
	for j, i := range k.idx {
		indices[j], values[j] = i, res[i]
		res[i] = 0
	}
	return nil
}
