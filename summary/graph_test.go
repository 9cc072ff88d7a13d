package summary_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/distflow/distflow/grad"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/summary"
	"github.com/distflow/distflow/tensor"
)

// The graph side: summary ops run in a session, their bytes written with
// AddSummary and read back by the independent reader.
func TestSummaryOpsInSession(t *testing.T) {
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1))
	loss := ops.Mean(s, ops.Square(s, x), nil, false)
	ops.ScalarSummary(s, "loss", loss)
	ops.HistogramSummary(s.SubScope("layer"), "layer/x", x)
	ops.ScalarSummary(s, "count", ops.Const(s, int32(7)))
	merged := ops.MergeAllSummaries(s)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if n := len(s.Graph().Collection(ops.SummariesCollection)); n != 3 {
		t.Fatalf("%d nodes in the summaries collection, want 3", n)
	}
	// The ops survive serialisation, as a remote session needs.
	g, err := graph.FromProto(s.Graph().ToProto())
	if err != nil {
		t.Fatal(err)
	}
	sess, err := session.New(g)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	w := newWriter(t, t.TempDir(), summary.WriterOptions{Suffix: "worker-0"})
	ctx := context.Background()
	xName := x.Name()
	for step := range int64(3) {
		xs := tensor.MustFromSlice([]float32{1, 2, float32(step)}, 3)
		out, err := sess.RunNamed(ctx, map[string]*tensor.Tensor{xName: xs}, []string{merged.Name()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if out[0].DType() != tensor.Uint8 || out[0].Rank() != 1 {
			t.Fatalf("merged summary is %v %v, want 1-D uint8", out[0].DType(), out[0].Shape())
		}
		if err := w.AddSummary(out[0].Uint8s(), step); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	events := readTB(t, w.Path())[1:]
	if len(events) != 3 {
		t.Fatalf("%d summary events, want 3", len(events))
	}
	for step, e := range events {
		if e.step != int64(step) || len(e.values) != 3 {
			t.Fatalf("event %d: step %d, %d values", step, e.step, len(e.values))
		}
		v := float32(step)
		if l := e.values[0]; l.tag != "loss" || l.simple != (1+4+v*v)/3 {
			t.Errorf("step %d: %s = %v, want loss = %v", step, l.tag, l.simple, (1+4+v*v)/3)
		}
		if h := e.values[1]; h.tag != "layer/x" || h.histo == nil || h.histo.num != 3 || h.histo.max != 2 {
			t.Errorf("step %d: histogram %+v", step, h)
		}
		if c := e.values[2]; c.tag != "count" || c.simple != 7 {
			t.Errorf("step %d: %s = %v, want count = 7", step, c.tag, c.simple)
		}
	}
}

func TestSummaryOpErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(s *graph.Scope)
		want  string
	}{
		{"empty tag", func(s *graph.Scope) { ops.ScalarSummary(s, "", ops.Const(s, float32(1))) }, "tag is empty"},
		{"non-scalar", func(s *graph.Scope) { ops.ScalarSummary(s, "x", ops.Const(s, []float32{1, 2})) }, "rank 0"},
		{"bool value", func(s *graph.Scope) { ops.HistogramSummary(s, "x", ops.Const(s, true)) }, "numeric"},
		{"merge nothing", func(s *graph.Scope) { ops.MergeSummary(s) }, "at least one"},
		{"merge floats", func(s *graph.Scope) { ops.MergeSummary(s, ops.Const(s, []float32{1})) }, "uint8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := graph.NewScope()
			tc.build(s)
			if err := s.Err(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	if out := ops.MergeAllSummaries(graph.NewScope()); out.Valid() {
		t.Error("MergeAllSummaries without summaries returned a node")
	}
	for _, op := range []string{"ScalarSummary", "HistogramSummary", "MergeSummary"} {
		if fn, ok := grad.Lookup(op); !ok || fn != nil {
			t.Errorf("%s: gradient registered %v, want declared none", op, ok)
		}
	}
}

func TestSummaryOpRunErrors(t *testing.T) {
	s := graph.NewScope()
	x := ops.Placeholder(s, "x", tensor.Float64, tensor.MakeShape(-1))
	h := ops.HistogramSummary(s, "h", x)
	a := ops.ScalarSummary(s, "dup", ops.Const(s, 1.0))
	b := ops.ScalarSummary(s, "dup", ops.Const(s, 2.0))
	dup := ops.MergeSummary(s, a, b)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ctx := context.Background()
	nan := tensor.MustFromSlice([]float64{1, 0, 0}, 3)
	nan.SetFloat64At(1, nanValue())
	if _, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{x: nan}, []graph.Output{h}, nil); !errors.Is(err, summary.ErrNonFinite) {
		t.Errorf("histogram of NaN: %v, want ErrNonFinite", err)
	}
	if _, err := sess.Run(ctx, nil, []graph.Output{dup}, nil); !errors.Is(err, summary.ErrDuplicateTag) {
		t.Errorf("merge of a duplicate tag: %v, want ErrDuplicateTag", err)
	}
}

func nanValue() float64 { z := 0.0; return z / z }
