package graph_test

import (
	"testing"

	"github.com/distflow/distflow/graph"
)

// TestKeyCache: the cache's key is the signature's own whatever the order
// of its feeds and targets and their duplicates; another fetch order, or
// another feed, is another key; and a signature seen before costs no
// allocation.
func TestKeyCache(t *testing.T) {
	g := pruneGraph(t)
	out := func(name string) graph.Output { return outputOf(t, g, name) }
	x, c, y, z, read := out("x"), out("c"), out("y"), out("z"), out("read")
	assign, side := out("assign").Node, out("side").Node
	sigs := []graph.Signature{
		{Feeds: []graph.Output{x, c}, Fetches: []graph.Output{y, z}, Targets: []*graph.Node{assign}},
		{Feeds: []graph.Output{c, x}, Fetches: []graph.Output{y, z}, Targets: []*graph.Node{assign}},
		{Feeds: []graph.Output{c, x, x}, Fetches: []graph.Output{y, z}, Targets: []*graph.Node{assign, assign}},
		{Feeds: []graph.Output{x, c}, Fetches: []graph.Output{z, y}, Targets: []*graph.Node{assign}},
		{Feeds: []graph.Output{x, read}, Fetches: []graph.Output{y, z}, Targets: []*graph.Node{assign}},
		{Feeds: []graph.Output{x, c}, Fetches: []graph.Output{y, z}, Targets: []*graph.Node{assign, side}},
		{Feeds: []graph.Output{x, c, read}, Fetches: []graph.Output{y, z}, Targets: []*graph.Node{assign}},
		{Fetches: []graph.Output{y}},
		{},
	}
	var cache graph.KeyCache
	for range 3 { // the second and third rounds come from the cache
		for i, s := range sigs {
			if got, want := cache.Key(s), s.Key(); got != want {
				t.Fatalf("signature %d (%v): cached key %q, want %q", i, s, got, want)
			}
		}
	}
	if sigs[0].Key() != sigs[2].Key() || sigs[0].Key() == sigs[3].Key() || sigs[0].Key() == sigs[6].Key() {
		t.Fatal("the signatures' own keys are not as this test assumes")
	}
	// The caller's slices may change after the call: the cache kept its own.
	s := graph.Signature{Feeds: []graph.Output{x, c}, Fetches: []graph.Output{y}}
	key := cache.Key(s)
	s.Feeds[1] = read
	if got := cache.Key(s); got != s.Key() || got == key {
		t.Errorf("after the caller changed its feeds: %q, want %q", got, s.Key())
	}
	if n := testing.AllocsPerRun(100, func() { cache.Key(sigs[1]) }); n != 0 {
		t.Errorf("a signature seen before: %v allocations, want 0", n)
	}
}

func BenchmarkKeyCache(b *testing.B) {
	g := pruneGraph(&testing.T{})
	x, _ := g.Output("x")
	c, _ := g.Output("c")
	z, _ := g.Output("z")
	assign, _ := g.Output("assign")
	s := graph.Signature{Feeds: []graph.Output{x, c}, Fetches: []graph.Output{z}, Targets: []*graph.Node{assign.Node}}
	b.Run("Key", func(b *testing.B) {
		for b.Loop() {
			_ = s.Key()
		}
	})
	b.Run("KeyCache", func(b *testing.B) {
		var cache graph.KeyCache
		for b.Loop() {
			_ = cache.Key(s)
		}
	})
}
