package localcluster

import (
	"slices"
	"testing"
)

// TestMetricsEnv checks that every task gets a free loopback metrics port
// unless the environment already says where (or "" for none).
func TestMetricsEnv(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want []string
	}{
		{[]string{"HOME=/root"}, []string{EnvMetricsAddress + "=127.0.0.1:0"}},
		{[]string{EnvMetricsAddress + "="}, nil},
		{[]string{EnvMetricsAddress + "=127.0.0.1:9100"}, nil},
		{[]string{EnvMetricsAddress + "_OTHER=1"}, []string{EnvMetricsAddress + "=127.0.0.1:0"}},
	} {
		if got := metricsEnv(c.env); !slices.Equal(got, c.want) {
			t.Errorf("metricsEnv(%q) = %q, want %q", c.env, got, c.want)
		}
	}
}
