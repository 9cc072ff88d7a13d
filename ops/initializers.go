package ops

import (
	"math"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/tensor"
)

// Initializer builds, in scope s, the initial value of a variable of dtype dt
// and the given shape. NewVariable calls it once, at graph-building time;
// the value is computed each time the variable's initializer runs.
type Initializer func(s *graph.Scope, dt tensor.DType, shape []int) graph.Output

// ZerosInit fills the variable with zeros.
func ZerosInit() Initializer { return ConstantInit(0) }

// OnesInit fills the variable with ones.
func OnesInit() Initializer { return ConstantInit(1) }

// ConstantInit fills the variable with v (converted to its dtype).
func ConstantInit(v float64) Initializer {
	return func(s *graph.Scope, dt tensor.DType, shape []int) graph.Output {
		// Fill keeps the graph small: a large zero constant would be
		// serialised and sent to the parameter servers in full.
		return Fill(s, Const(s, shape), Scalar(s, dt, v))
	}
}

// RandomNormalInit draws from the normal distribution N(mean, stddev²).
// A non-zero seed makes the values reproducible.
func RandomNormalInit(mean, stddev float64, seed int) Initializer {
	return func(s *graph.Scope, dt tensor.DType, shape []int) graph.Output {
		return stateAffine(s, RandomNormal(s, Const(s, shape), dt, seed), stddev, mean)
	}
}

// TruncatedNormalInit draws from N(mean, stddev²), re-drawing values more
// than 2 standard deviations from the mean.
func TruncatedNormalInit(mean, stddev float64, seed int) Initializer {
	return func(s *graph.Scope, dt tensor.DType, shape []int) graph.Output {
		return stateAffine(s, TruncatedNormal(s, Const(s, shape), dt, seed), stddev, mean)
	}
}

// RandomUniformInit draws from the uniform distribution on [minval, maxval).
func RandomUniformInit(minval, maxval float64, seed int) Initializer {
	return func(s *graph.Scope, dt tensor.DType, shape []int) graph.Output {
		return stateAffine(s, RandomUniform(s, Const(s, shape), dt, seed), maxval-minval, minval)
	}
}

// GlorotUniformInit draws from the uniform distribution on [-limit, limit)
// with limit = sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio 2010; Keras'
// glorot_uniform). See GlorotFans for the fans.
func GlorotUniformInit(seed int) Initializer {
	return func(s *graph.Scope, dt tensor.DType, shape []int) graph.Output {
		in, out := GlorotFans(shape)
		limit := math.Sqrt(6 / float64(in+out))
		return RandomUniformInit(-limit, limit, seed)(s, dt, shape)
	}
}

// GlorotNormalInit draws from a normal distribution truncated at 2 standard
// deviations whose standard deviation, after truncation, is
// sqrt(2 / (fan_in + fan_out)) (Keras' glorot_normal).
func GlorotNormalInit(seed int) Initializer {
	return func(s *graph.Scope, dt tensor.DType, shape []int) graph.Output {
		in, out := GlorotFans(shape)
		// 0.8796... is the standard deviation of the standard normal
		// truncated to [-2, 2]: dividing by it restores the wanted spread.
		stddev := math.Sqrt(2/float64(in+out)) / 0.87962566103423978
		return TruncatedNormalInit(0, stddev, seed)(s, dt, shape)
	}
}

// GlorotFans returns the fan-in and fan-out of a weight of the given shape,
// as Keras computes them: a scalar has fans 1; a vector [n] has n and n; a
// matrix [in, out] has in and out; a convolution kernel [kh, kw, cin, cout]
// (HWIO) has kh*kw*cin and kh*kw*cout. Zero fans are raised to 1.
func GlorotFans(shape []int) (fanIn, fanOut int) {
	switch len(shape) {
	case 0:
		fanIn, fanOut = 1, 1
	case 1:
		fanIn, fanOut = shape[0], shape[0]
	default:
		receptive := tensor.NumElements(shape[:len(shape)-2])
		fanIn, fanOut = shape[len(shape)-2]*receptive, shape[len(shape)-1]*receptive
	}
	return max(fanIn, 1), max(fanOut, 1)
}

// stateAffine returns x*scale + shift, leaving out the identities.
func stateAffine(s *graph.Scope, x graph.Output, scale, shift float64) graph.Output {
	if !x.Valid() {
		return x // the scope holds the error
	}
	if scale != 1 {
		x = Mul(s, x, Scalar(s, x.DType(), scale))
	}
	if shift != 0 {
		x = Add(s, x, Scalar(s, x.DType(), shift))
	}
	return x
}
