package graph_test

import (
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/tensor"
)

func TestNameCache(t *testing.T) {
	req := func(feeds []string, fetches, targets []string) *pb.RunGraphRequest {
		r := &pb.RunGraphRequest{Fetches: fetches, Targets: targets}
		for _, f := range feeds {
			r.Feeds = append(r.Feeds, &pb.NamedTensor{Name: f})
		}
		return r
	}
	var c graph.NameCache[int]
	step := req([]string{"x:0", "y:0"}, []string{"loss:0"}, []string{"train"})
	if _, ok := c.Get(step); ok {
		t.Fatal("an empty cache had a value")
	}
	c.Put(step, 1)
	step.Feeds[0].Name, step.Fetches[0] = "changed:0", "changed:0" // the caller's to reuse
	misses := []*pb.RunGraphRequest{
		req([]string{"y:0", "x:0"}, []string{"loss:0"}, []string{"train"}), // names compared in order
		req([]string{"x:0"}, []string{"loss:0"}, []string{"train"}),
		req([]string{"x:0", "y:0"}, []string{"acc:0"}, []string{"train"}),
		req([]string{"x:0", "y:0"}, []string{"loss:0"}, nil),
		step,
	}
	for i, r := range misses {
		if v, ok := c.Get(r); ok {
			t.Errorf("request %d: got %d for names never put", i, v)
		}
	}
	same := req([]string{"x:0", "y:0"}, []string{"loss:0"}, []string{"train"})
	if v, ok := c.Get(same); !ok || v != 1 {
		t.Fatalf("Get = %d, %v; want 1, true", v, ok)
	}
	if n := testing.AllocsPerRun(100, func() { c.Get(same) }); n != 0 {
		t.Errorf("a hit allocated %.0f times", n)
	}
	// A step of another kind of request, with the same names, is a hit too.
	if v, ok := c.Get(&pb.RunStepRequest{Feeds: same.Feeds, Fetches: same.Fetches, Targets: same.Targets}); !ok || v != 1 {
		t.Errorf("RunStepRequest: Get = %d, %v; want 1, true", v, ok)
	}
	// The oldest entry goes when the cache is full.
	for i := range 8 {
		c.Put(req(nil, []string{"f:" + string(rune('0'+i))}, nil), 2+i)
	}
	if _, ok := c.Get(same); ok {
		t.Error("the oldest entry outlived eight newer ones")
	}
	if v, ok := c.Get(req(nil, []string{"f:7"}, nil)); !ok || v != 9 {
		t.Errorf("newest: Get = %d, %v; want 9, true", v, ok)
	}
}

// TestOutputNameAllocatesNothing: the runtime names tensors at every step.
func TestOutputNameAllocatesNothing(t *testing.T) {
	g := pruneGraph(t)
	y := outputOf(t, g, "y")
	if got := y.Name(); got != "y:0" {
		t.Fatalf("Name = %q, want y:0", got)
	}
	if got := (graph.Output{Node: y.Node, Index: 3}).Name(); got != "y:3" {
		t.Errorf("an index past the outputs: Name = %q, want y:3", got)
	}
	if n := testing.AllocsPerRun(100, func() { _ = y.Name() }); n != 0 {
		t.Errorf("Name allocated %.0f times", n)
	}
}

// TestTensorFromProtoAllocations: decoding a fed or fetched tensor makes
// the tensor and nothing else (its shape goes on the stack).
func TestTensorFromProtoAllocations(t *testing.T) {
	tp := graph.TensorToProto(tensor.MustFromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3))
	want := testing.AllocsPerRun(100, func() { tensor.New(tensor.Float32, 2, 3) })
	if n := testing.AllocsPerRun(100, func() {
		if _, err := graph.TensorFromProto(tp); err != nil {
			t.Fatal(err)
		}
	}); n > want {
		t.Errorf("TensorFromProto allocated %.0f times, tensor.New %.0f", n, want)
	}
	// A view makes the tensor without its data.
	if n := testing.AllocsPerRun(100, func() {
		if _, err := graph.TensorViewFromProto(tp); err != nil {
			t.Fatal(err)
		}
	}); n >= want {
		t.Errorf("TensorViewFromProto allocated %.0f times, tensor.New %.0f", n, want)
	}
	v, err := graph.TensorViewFromProto(tp)
	if err != nil {
		t.Fatal(err)
	}
	tp.Content[0] ^= 0xff
	if got, _ := graph.TensorFromProto(tp); !tensor.Equal(v, got) {
		t.Errorf("the view %v does not show its proto's content %v", v, got)
	}
}

func TestResolve(t *testing.T) {
	g := pruneGraph(t)
	feed := func(names ...string) []*pb.NamedTensor {
		var out []*pb.NamedTensor
		for _, n := range names {
			out = append(out, &pb.NamedTensor{Name: n})
		}
		return out
	}
	sig, err := g.Resolve(&pb.RunStepRequest{Feeds: feed("x:0", "c:0"), Fetches: []string{"y:0"}, Targets: []string{"assign"}})
	if err != nil {
		t.Fatal(err)
	}
	want := graph.Signature{Feeds: []graph.Output{outputOf(t, g, "x"), outputOf(t, g, "c")}, Fetches: []graph.Output{outputOf(t, g, "y")},
		Targets: []*graph.Node{outputOf(t, g, "assign").Node}}
	if sig.Key() != want.Key() || sig.Feeds[0] != want.Feeds[0] {
		t.Errorf("Resolve = %v, want %v in the request's order", sig, want)
	}
	for _, tc := range []struct {
		req  *pb.RunStepRequest
		want string
	}{
		{&pb.RunStepRequest{Feeds: feed("ghost:0")}, `feed "ghost:0"`},
		{&pb.RunStepRequest{Feeds: feed("x:0", "x:0")}, "fed twice"},
		{&pb.RunStepRequest{Fetches: []string{"y:7"}}, `fetch "y:7"`},
		{&pb.RunStepRequest{Targets: []string{"ghost"}}, `target "ghost"`},
	} {
		if _, err := g.Resolve(tc.req); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Resolve(%v) = %v, want an error naming %s", tc.req, err, tc.want)
		}
	}
}
