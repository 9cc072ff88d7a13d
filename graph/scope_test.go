package graph_test

import (
	"testing"

	"github.com/distflow/distflow/graph"
)

func TestVariableScope(t *testing.T) {
	s := graph.NewScope()
	a, b := s.VariableScope("hidden"), s.VariableScope("hidden")
	for _, c := range []struct{ got, want string }{
		{a.Prefix(), "hidden/"}, {a.VariablePrefix(), "hidden/"},
		{b.Prefix(), "hidden_1/"}, {b.VariablePrefix(), "hidden/"}, // nodes unique, variables exact
		{s.NameScope("tower_1").VariableScope("hidden").VariablePrefix(), "hidden/"},
		{a.VariableScope("inner").VariablePrefix(), "hidden/inner/"},
	} {
		if c.got != c.want {
			t.Errorf("prefix %q, want %q", c.got, c.want)
		}
	}
}

func TestSeed(t *testing.T) {
	s := graph.NewScope()
	if s.Seed() != 0 {
		t.Errorf("a new scope's seed is %d", s.Seed())
	}
	if got := s.WithSeed(7).SubScope("a").Seed(); got != 7 {
		t.Errorf("a sub-scope's seed is %d, want 7", got)
	}
	if s.Seed() != 0 {
		t.Error("WithSeed changed its receiver")
	}
}
