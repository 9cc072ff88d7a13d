package train

import "testing"

func TestAllreduceAdaptiveTau(t *testing.T) {
	tests := []struct {
		step, comm, f float64
		want          int
	}{
		{1e-3, 0, 0.1, 1},         // free communication: every step
		{1e-3, 1e-4, 0.1, 1},      // 0.9 steps' worth
		{1e-3, 1e-3, 0.1, 9},      // comm = one step: 9 steps keep it at 10%
		{1e-3, 2e-3, 0.1, 18},     //
		{1e-3, 1e-3, 0.5, 1},      // a generous budget
		{1e-3, 1, 0.1, 64},        // bounded
		{0, 1e-3, 0.1, 64},        // no measured step
		{1e-3, 5e-3, 0.2, 20},     // 5*(0.8/0.2)
		{2e-3, 1.01e-2, 0.1, 46},  // ceil(45.45)
		{1e-3, 1e-3, 0.1 / 3, 29}, // ceil(29)
		{1e-2, 1e-3, 0.1, 1},      // cheap communication
		{1e-3, 3.2e-3, 0.1, 29},   // ceil(28.8)
		{1e-3, 1e-3, 0.01, 64},    // 99 > 64
		{5e-4, 1e-3, 0.1, 18},     // half-length steps double tau
		{1e-3, 0.5e-3, 0.1, 5},    // ceil(4.5)
		{1e-3, 7.2e-3, 0.1, 64},   // ceil(64.8) -> bound
	}
	for _, tc := range tests {
		if got := allreduceAdaptiveTau(tc.step, tc.comm, tc.f, 1, 64); got != tc.want {
			t.Errorf("tau(step %g, comm %g, f %g) = %d, want %d", tc.step, tc.comm, tc.f, got, tc.want)
		}
	}
}
