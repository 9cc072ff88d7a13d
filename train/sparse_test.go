package train_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// embeddingLoss builds a lookup of ids (fed, int64) into a 6x3 table and a
// loss that weights each looked-up element differently. dense reads the
// table through a Mul, whose gradient is dense, instead of directly.
func embeddingLoss(s *graph.Scope, dt tensor.DType, dense bool) (table *ops.Variable, ids graph.Output, loss graph.Output) {
	init := tensor.New(dt, 6, 3)
	for i := range 18 {
		init.SetFloat64At(i, math.Sin(float64(i)))
	}
	table = ops.NewVariable(s, "table", dt, []int{6, 3}, func(s *graph.Scope, _ tensor.DType, _ []int) graph.Output {
		return ops.Const(s, init)
	})
	ids = ops.Placeholder(s, "ids", tensor.Int64, tensor.MakeShape(-1))
	v := table.Value()
	if dense {
		v = ops.Mul(s, v, ops.Scalar(s, dt, 1))
	}
	e := ops.Gather(s, v, ids, 0)
	w := tensor.New(dt, 3)
	for i, x := range []float64{1, -2, 0.5} {
		w.SetFloat64At(i, x)
	}
	// sum(tanh(e) * w): non-linear, so steps differ from one another.
	loss = ops.Sum(s, ops.Mul(s, ops.Tanh(s, e), ops.Const(s, w)), nil, false)
	return table, ids, loss
}

func runEmbedding(t *testing.T, opt train.Optimizer, dense bool, batches [][]int64) (values []float64, opsUsed string) {
	t.Helper()
	s := graph.NewScope()
	table, ids, loss := embeddingLoss(s, tensor.Float64, dense)
	step, err := train.Minimize(s, opt, loss, nil)
	if err != nil {
		t.Fatal(err)
	}
	init := ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range s.Graph().Nodes() {
		if strings.Contains(n.Op(), "Apply") {
			names = append(names, n.Op())
		}
	}
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}
	for _, b := range batches {
		feeds := map[graph.Output]*tensor.Tensor{ids: tensor.MustFromSlice(b, len(b))}
		if _, err := sess.Run(ctx, feeds, nil, []*graph.Node{step}); err != nil {
			t.Fatal(err)
		}
	}
	out, err := sess.Run(ctx, nil, []graph.Output{table.Value()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out[0].Float64s(), strings.Join(names, ",")
}

// TestSparseOptimizersEqualDense: on batches that touch every row (with
// repeats), each optimizer's sparse update equals its dense update; on a
// batch that misses rows, the sparse update leaves those rows alone, as
// the dense update of SGD and Adagrad does too (Momentum, Adam and FTRL
// move untouched rows when dense, which is why their sparse forms are
// "lazy").
func TestSparseOptimizersEqualDense(t *testing.T) {
	full := [][]int64{{0, 1, 2, 3, 4, 5, 2, 2}, {5, 4, 3, 2, 1, 0, 0}, {3, 1, 4, 1, 5, 0, 2}}
	partial := [][]int64{{1, 3, 1}, {3, 0, 0}}
	ftrl := train.NewFtrl(0.3, 0.01, 0.1)
	cases := []struct {
		opt        train.Optimizer
		sparseOp   string
		lazyDiffer bool // the dense update moves untouched rows
	}{
		{train.NewGradientDescent(0.1), "SparseApplyGradientDescent", false},
		{train.NewMomentum(0.1, 0.9, false), "SparseApplyMomentum", true},
		{train.NewMomentum(0.1, 0.9, true), "SparseApplyMomentum", true},
		{train.NewAdagrad(0.3, 0.1), "SparseApplyAdagrad", false},
		{train.NewAdam(0.05, 0.9, 0.999, 1e-8), "SparseApplyAdam", true},
		{ftrl, "SparseApplyFtrl", true},
	}
	for _, tc := range cases {
		t.Run(tc.sparseOp, func(t *testing.T) {
			sparse, used := runEmbedding(t, tc.opt, false, full)
			if !strings.Contains(used, tc.sparseOp) || strings.Contains(used, ","+strings.TrimPrefix(tc.sparseOp, "Sparse")) {
				t.Fatalf("the graph's updates are %q: want %s only", used, tc.sparseOp)
			}
			dense, used := runEmbedding(t, tc.opt, true, full)
			if strings.Contains(used, "Sparse") {
				t.Fatalf("the dense graph's updates are %q", used)
			}
			for i := range dense {
				if math.Abs(dense[i]-sparse[i]) > 1e-12 {
					t.Fatalf("element %d: sparse %v, dense %v", i, sparse[i], dense[i])
				}
			}
			got, _ := runEmbedding(t, tc.opt, false, partial)
			want, _ := runEmbedding(t, train.NewGradientDescent(0), false, nil) // the initial table
			for _, row := range []int{2, 4, 5} {
				for c := range 3 {
					if i := row*3 + c; got[i] != want[i] {
						t.Fatalf("untouched row %d moved: %v -> %v", row, want[i], got[i])
					}
				}
			}
			if !tc.lazyDiffer {
				dense, _ := runEmbedding(t, tc.opt, true, partial)
				for i := range dense {
					if math.Abs(dense[i]-got[i]) > 1e-12 {
						t.Fatalf("partial batches, element %d: sparse %v, dense %v", i, got[i], dense[i])
					}
				}
			}
		})
	}
}

// TestFtrlDense checks one ApplyFtrl step against the formulas by hand.
func TestFtrlDense(t *testing.T) {
	s := graph.NewScope()
	w := ops.NewVariable(s, "w", tensor.Float64, []int{2}, ops.ConstantInit(0.5))
	loss := ops.Sum(s, ops.Mul(s, w.Value(), ops.Const(s, []float64{2, -0.01})), nil, false)
	step, err := train.Minimize(s, train.NewFtrl(0.1, 0.05, 0.2), loss, nil)
	if err != nil {
		t.Fatal(err)
	}
	init := ops.GlobalVariablesInitializer(s)
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{step}); err != nil {
		t.Fatal(err)
	}
	out, err := sess.Run(ctx, nil, []graph.Output{w.Value()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range []float64{2, -0.01} {
		an := 0.1 + g*g
		linear := g - (math.Sqrt(an)-math.Sqrt(0.1))/0.1*0.5
		want := 0.0
		if math.Abs(linear) > 0.05 {
			want = (math.Copysign(0.05, linear) - linear) / (math.Sqrt(an)/0.1 + 2*0.2)
		}
		if math.Abs(out[0].Float64s()[i]-want) > 1e-7 { // lr and l1 are float32 hyper-parameters
			t.Errorf("w[%d] = %v, want %v", i, out[0].Float64s()[i], want)
		}
	}
	if out[0].Float64s()[1] != 0 {
		t.Errorf("a coordinate whose |linear| stays under l1 should be exactly zero, got %v", out[0].Float64s()[1])
	}
}

// TestPerVariable trains the table with FTRL and another variable with
// Adagrad, and increments the global step once.
func TestPerVariable(t *testing.T) {
	s := graph.NewScope()
	table, ids, loss := embeddingLoss(s, tensor.Float64, false)
	w := ops.NewVariable(s, "w", tensor.Float64, []int{1}, ops.ConstantInit(1))
	loss = ops.Add(s, loss, ops.Sum(s, ops.Square(s, w.Value()), nil, false))
	gs := train.CreateGlobalStep(s)
	opt := &train.PerVariable{
		Rules:   []train.VariableRule{{Match: func(v *ops.Variable) bool { return v.Name() == table.Name() }, Optimizer: train.NewFtrl(0.1, 0, 0)}},
		Default: train.NewAdagrad(0.1, 0.1),
	}
	step, err := train.Minimize(s, opt, loss, gs)
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]int{}
	for _, n := range s.Graph().Nodes() {
		if strings.Contains(n.Op(), "Apply") {
			used[n.Op()]++
		}
	}
	if used["SparseApplyFtrl"] != 1 || used["ApplyAdagrad"] != 1 || len(used) != 2 {
		t.Fatalf("updates %v: want the table's sparse FTRL and w's Adagrad", used)
	}
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{ops.GlobalVariablesInitializer(s)}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{ids: tensor.MustFromSlice([]int64{1, 2}, 2)}, nil, []*graph.Node{step}); err != nil {
			t.Fatal(err)
		}
	}
	out, err := sess.Run(ctx, nil, []graph.Output{gs.Value(), w.Value()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Int64s()[0] != 3 || out[1].Float64s()[0] >= 1 {
		t.Errorf("global step %v, w %v: want 3 and w below 1", out[0], out[1])
	}
}
