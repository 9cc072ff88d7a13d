package estimator

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/distflow/distflow/allreduce"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// sparseARRank is a rank of the AllReduce strategy's step on an
// embedding model: a table read by Gather of the fed ids, and (unless
// tableOnly) a dense bias; Adam.
type sparseARRank struct {
	sess  *session.Session
	st    *allReduceStep
	ids   graph.Output
	table *ops.Variable
	m     *ops.Variable // the table's Adam_m
}

func newSparseARRank(t *testing.T, c Compression, rows, dim int, tableOnly bool) *sparseARRank {
	t.Helper()
	s := graph.NewScope()
	r := &sparseARRank{}
	r.table = ops.NewVariable(s, "table", tensor.Float32, []int{rows, dim}, ops.RandomUniformInit(-0.5, 0.5, 3))
	r.ids = ops.Placeholder(s, "ids", tensor.Int64, tensor.MakeShape(-1))
	looked := ops.Gather(s, r.table.Value(), r.ids, 0)
	if !tableOnly {
		bias := ops.NewVariable(s, "bias", tensor.Float32, []int{dim}, ops.ZerosInit())
		looked = ops.Add(s, looked, bias.Value())
	}
	loss := ops.Mean(s, ops.Square(s, ops.Sub(s, looked, ops.Scalar(s, tensor.Float32, 1))), nil, false)
	tr, err := train.NewAllReduceTrainer(s, train.NewAdam(0.1, 0.9, 0.999, 1e-7), loss, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.st = &allReduceStep{t: tr, comp: newGradCompressor(c)}
	r.m = ops.LookupVariable(s.Graph(), "table/Adam_m")
	init := ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if r.sess, err = session.New(s.Graph()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.sess.Close() })
	if _, err := r.sess.Run(t.Context(), nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *sparseARRank) state(t *testing.T) (table, m *tensor.Tensor) {
	t.Helper()
	out, err := r.sess.Run(t.Context(), nil, []graph.Output{r.table.Value(), r.m.Value()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out[0], out[1]
}

// sparseARTrain trains ranks of the model on one ring: at step 0 rank r
// looks up rows 2r and 2r+1, then rows 8 and 9+r. It returns the ranks,
// and rank 0's table and Adam_m after step 0.
func sparseARTrain(t *testing.T, c Compression, ranks, rows, dim, steps int, tableOnly bool) ([]*sparseARRank, *tensor.Tensor, *tensor.Tensor) {
	t.Helper()
	rings := inProcessRings(t, ranks, allreduce.InProcessConfig{})
	reps := make([]*sparseARRank, ranks)
	for i := range reps {
		reps[i] = newSparseARRank(t, c, rows, dim, tableOnly)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	each := func(f func(rank int) error) {
		var wg sync.WaitGroup
		errs := make([]error, ranks)
		for i := range ranks {
			wg.Go(func() { errs[i] = f(i) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("%v: rank %d: %v", c, i, err)
			}
		}
	}
	each(func(rank int) error { return reps[rank].st.Broadcast(ctx, reps[rank].sess, rings[rank]) })
	var table0, m0 *tensor.Tensor
	for step := range steps {
		each(func(rank int) error {
			ids := []int64{8, int64(9 + rank)}
			if step == 0 {
				ids = []int64{int64(2 * rank), int64(2*rank + 1), 8}
			}
			r := reps[rank]
			_, _, err := r.st.Step(ctx, r.sess, map[graph.Output]*tensor.Tensor{r.ids: tensor.MustFromSlice(ids, len(ids))}, rings[rank], int64(step+1), nil)
			return err
		})
		if step == 0 {
			table0, m0 = reps[0].state(t)
		}
	}
	return reps, table0, m0
}

// TestCompressedAllReduceKeepsSparseGradients: under every compression,
// the AllReduce strategy's step all-gathers an embedding table's rows
// (uncompressed) and applies them with Adam's lazy sparse update: the
// ranks end with the same table, the rows looked up at step 0 only keep
// their values and moments after it, and a model whose only gradient is
// the table's trains exactly as without compression. The table's
// gradient was compressed as a dense one: rounded to half floats, or
// sparsified to its top-k entries, and Adam moved every row it had seen.
func TestCompressedAllReduceKeepsSparseGradients(t *testing.T) {
	const ranks, rows, dim, steps = 2, 64, 4, 4
	plain, _, _ := sparseARTrain(t, Compression{}, ranks, rows, dim, steps, true)
	plainTable, _ := plain[0].state(t)
	for _, c := range []Compression{{Kind: FP16}, {Kind: BF16}, {Kind: TopK}, {Kind: TopK, Ratio: 0.1, Warmup: 2}} {
		t.Run(c.String(), func(t *testing.T) {
			reps, table0, m0 := sparseARTrain(t, c, ranks, rows, dim, steps, false)
			table, m := reps[0].state(t)
			for rank, r := range reps[1:] {
				if x, y := r.state(t); !tensor.Equal(x, table) || !tensor.Equal(y, m) {
					t.Errorf("rank %d's table or moments differ from rank 0's", rank+1)
				}
			}
			for row := range 2 * ranks {
				lo, hi := row*dim, (row+1)*dim
				if !slices.Equal(table.Float32s()[lo:hi], table0.Float32s()[lo:hi]) || !slices.Equal(m.Float32s()[lo:hi], m0.Float32s()[lo:hi]) {
					t.Errorf("row %d (looked up at step 0 only) moved after it: %v, moment %v; want %v, %v", row,
						table.Float32s()[lo:hi], m.Float32s()[lo:hi], table0.Float32s()[lo:hi], m0.Float32s()[lo:hi])
				}
			}

			only, _, _ := sparseARTrain(t, c, ranks, rows, dim, steps, true)
			if x, _ := only[0].state(t); !tensor.Equal(x, plainTable) {
				t.Errorf("a table-only model trained with %v differs from its training without compression: rows 0-1 %v, want %v",
					c, x.Float32s()[:2*dim], plainTable.Float32s()[:2*dim])
			}
		})
	}
}
