package localcluster

import (
	"slices"
	"strings"
	"testing"
)

func TestWithoutFlag(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"train --local-cluster ps=1,worker=2 --model mlp", "train --model mlp"},
		{"train --local-cluster=ps=1,worker=2 --model mlp", "train --model mlp"},
		{"-local-cluster ps=1,worker=2 -v", "-v"},
		{"-local-cluster=worker=1", ""},
		{"--local-cluster-size 3 --local-clusters x", "--local-cluster-size 3 --local-clusters x"},
		{"--model mlp --local-cluster", "--model mlp"},
		{"a -- --local-cluster ps=1", "a -- --local-cluster ps=1"},
		{"", ""},
	} {
		got := WithoutFlag(strings.Fields(tc.in), "local-cluster")
		if want := strings.Fields(tc.want); !slices.Equal(got, want) {
			t.Errorf("WithoutFlag(%q) = %q, want %q", tc.in, got, want)
		}
	}
}
