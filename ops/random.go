package ops

import (
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/tensor"
)

// Random ops take their output shape as an int32 vector (a Const gives an
// exact static shape). A non-zero seed makes the node's stream deterministic:
// two sessions on the same graph produce the same values, step after step.
// Seed 0 draws a fresh seed when the node's kernel is built.

// RandomNormal returns samples of the standard normal distribution.
func RandomNormal(s *graph.Scope, shape graph.Output, dt tensor.DType, seed int) graph.Output {
	return stateRandom(s, "RandomNormal", shape, dt, seed)
}

// TruncatedNormal returns samples of the standard normal distribution,
// re-drawn when more than 2 standard deviations from the mean.
func TruncatedNormal(s *graph.Scope, shape graph.Output, dt tensor.DType, seed int) graph.Output {
	return stateRandom(s, "TruncatedNormal", shape, dt, seed)
}

// RandomUniform returns samples of the uniform distribution on [0, 1).
func RandomUniform(s *graph.Scope, shape graph.Output, dt tensor.DType, seed int) graph.Output {
	return stateRandom(s, "RandomUniform", shape, dt, seed)
}

func stateRandom(s *graph.Scope, op string, shape graph.Output, dt tensor.DType, seed int) graph.Output {
	return s.Out(op, op, []graph.Output{shape}, map[string]any{"dtype": dt, "seed": seed})
}
