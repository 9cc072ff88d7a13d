package layers

import (
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// Cell is one time step of a recurrent layer, with its variables already
// made: Step adds no variables, so a loop can call it once per time step
// (Unroll) or once in a loop body.
type Cell interface {
	// StateSizes returns the width of each state tensor, in the order Step
	// takes and returns them: [units, units] for an LSTM's h and c,
	// [units] for a GRU's h.
	StateSizes() []int
	// Step computes one time step from the input x [batch, features] and
	// the state (one [batch, width] tensor per StateSizes entry). It
	// returns the output [batch, units], units being StateSizes()[0]
	// (DynamicUnroll sizes its outputs so), and the next state.
	Step(s *graph.Scope, x graph.Output, state []graph.Output) (graph.Output, []graph.Output)
}

// Unroll applies cell to each time step of x [batch, time, features] in
// turn, starting from the state initial (nil: zeros), and returns the
// output of every step ([batch, units] each) and the final state. It is
// TensorFlow's static_rnn: the time dimension must be known at build time,
// and the graph holds one copy of the step per time step, whose gradient
// is back-propagation through time. After a build error (recorded in s)
// it returns nils.
func Unroll(s *graph.Scope, cell Cell, x graph.Output, initial []graph.Output) (outputs, final []graph.Output) {
	if s.Err() != nil {
		return nil, nil
	}
	sh := x.Shape()
	if !x.Valid() || !sh.KnownRank() || sh.Rank() != 3 || sh.Dim(1) < 1 {
		s.SetErr(fmt.Errorf("layers: Unroll: input %s has shape %v; want [batch, time, features] with the time steps known at build time (DynamicUnroll, or a layer's Dynamic, takes any number)", x, sh))
		return nil, nil
	}
	sizes := cell.StateSizes()
	state := initial
	if state == nil {
		state = make([]graph.Output, len(sizes))
		for i, w := range sizes {
			state[i] = zeroState(s, x, w)
		}
	}
	if len(state) != len(sizes) {
		s.SetErr(fmt.Errorf("layers: Unroll: %d initial state tensors for a cell with %d", len(state), len(sizes)))
		return nil, nil
	}
	steps := sh.Dim(1)
	// One Split, whose gradient is one Concat, rather than a slice per
	// step, each of whose gradients would be a zero tensor of x's size.
	xs := []graph.Output{x}
	if steps > 1 {
		xs = ops.Split(s, x, 1, steps)
	}
	outputs = make([]graph.Output, steps)
	for t := range xs {
		ts := s.SubScope(fmt.Sprintf("step_%d", t))
		outputs[t], state = cell.Step(ts, ops.Squeeze(ts, xs[t], 1), state)
		if s.Err() != nil {
			return nil, nil
		}
	}
	return outputs, state
}

// Stack joins the per-step outputs of Unroll ([batch, units] each) into
// one tensor [batch, time, units].
func Stack(s *graph.Scope, outputs []graph.Output) graph.Output {
	if len(outputs) == 0 {
		s.SetErr(fmt.Errorf("layers: Stack: no outputs to stack"))
		return graph.Output{}
	}
	expanded := make([]graph.Output, len(outputs))
	for i, o := range outputs {
		expanded[i] = ops.ExpandDims(s, o, 1)
	}
	if len(expanded) == 1 {
		return expanded[0]
	}
	return ops.Concat(s, 1, expanded...)
}

// zeroState is a zero state [batch, width] for the batch of x, whose size
// may be known only at run time.
func zeroState(s *graph.Scope, x graph.Output, width int) graph.Output {
	// Zeros [batch, 1] (a sum of zeros over x's other axes, which may be
	// empty) times ones [width]: no dimension is computed at run time, as
	// a Fill of x's batch would be, which kept a GPU step from being
	// replayed whole; the static shape keeps the width, which the step's
	// shape functions need, and the batch if known.
	axes := make([]int, 0, x.Shape().Rank())
	for i := 1; i < x.Shape().Rank(); i++ {
		axes = append(axes, i)
	}
	column := ops.ReshapeTo(s, ops.Sum(s, ops.ZerosLike(s, x), axes, false), x.Shape().Dim(0), 1)
	return ops.Mul(s, column, ops.Fill(s, ops.Const(s, []int32{int32(width)}), ops.Scalar(s, x.DType(), 1)))
}

// recurrentApply is the part common to the recurrent layers' Apply: the
// cell over x's time steps, then every output or the last one.
func recurrentApply(s *graph.Scope, cell Cell, x graph.Output, returnSequences bool) graph.Output {
	if cell == nil || s.Err() != nil {
		return graph.Output{}
	}
	outputs, _ := Unroll(s, cell, x, nil)
	if outputs == nil {
		return graph.Output{}
	}
	if returnSequences {
		return Stack(s, outputs)
	}
	return outputs[len(outputs)-1]
}

// recurrentInput checks x is [batch, time, features] of a float dtype with
// known features, and units positive.
func recurrentInput(s *graph.Scope, layer string, x graph.Output, units int) (tensor.DType, int, bool) {
	dt, in, ok := inputCheck(s, layer, x, 3)
	if !ok {
		return dt, in, ok
	}
	if x.Shape().Rank() != 3 {
		s.SetErr(fmt.Errorf("layers: %s: input %s has shape %v; want [batch, time, features]", layer, x, x.Shape()))
		return tensor.Invalid, 0, false
	}
	if units <= 0 {
		s.SetErr(fmt.Errorf("layers: %s: Units %d must be positive", layer, units))
		return tensor.Invalid, 0, false
	}
	return dt, in, true
}

// LSTM is a long short-term memory layer over [batch, time, features], as
// tf.keras.layers.LSTM(units, activation, recurrent_activation, use_bias,
// unit_forget_bias, return_sequences) with implementation 2: for each time
// step, z = x·kernel + h·recurrent_kernel + bias is split into the gates
// i, f, c, o (in that order), and
//
//	c' = f⊙c + i⊙activation(z_c),  h' = o⊙activation(c'),
//
// with i, f, o = recurrent_activation(z_i, z_f, z_o). Its variables are
// "<name>/kernel" [features, 4·Units], "<name>/recurrent_kernel" [Units,
// 4·Units] and "<name>/bias" [4·Units]. The state starts at zeros. The
// time steps are unrolled, so their number must be known at build time,
// unless Dynamic runs them in a graph loop.
type LSTM struct {
	// Units is the size of the output and of each state (required).
	Units int
	// Activation is applied to the candidate and to the cell state (nil:
	// tanh, as Keras'; unlike Dense, nil is not the identity here).
	// RecurrentActivation is applied to the gates (nil: sigmoid).
	Activation, RecurrentActivation Activation
	// NoBias leaves the bias out (use_bias=False).
	NoBias bool
	// NoUnitForgetBias starts the forget gate's bias at BiasInit's value
	// like the others'; by default it starts at 1 (unit_forget_bias=True),
	// so that the cell remembers at the start of training (Jozefowicz et
	// al. 2015), as TensorFlow's LSTMCell(forget_bias=1.0) does by adding 1.
	NoUnitForgetBias bool
	// KernelInit initialises the input kernel (nil: Glorot uniform),
	// RecurrentInit the recurrent kernel (nil: OrthogonalInit(1)), BiasInit
	// the bias (nil: zeros). The seeds of the defaults come from the
	// scope's seed and the variables' full names.
	KernelInit, RecurrentInit, BiasInit ops.Initializer
	// KernelRegularizer and RecurrentRegularizer add penalties of the
	// kernels to the regularization losses (nil: none).
	KernelRegularizer, RecurrentRegularizer Regularizer
	// ReturnSequences returns every step's output [batch, time, Units]
	// instead of the last one [batch, Units].
	ReturnSequences bool
	// Dynamic runs the time steps in a loop of the graph (DynamicUnroll)
	// rather than unrolling them (Unroll): their number may then be
	// unknown at build time, and the graph does not grow with it.
	Dynamic bool
	// Name names the layer's scope (default "lstm", made unique).
	Name string
}

// Apply implements Layer.
func (l LSTM) Apply(s *graph.Scope, x graph.Output, _ bool) graph.Output {
	dt, in, ok := recurrentInput(s, "LSTM", x, l.Units)
	if !ok {
		return graph.Output{}
	}
	ls := layerScope(s, l.Name, "lstm")
	return recurrentRun(ls, l.newCell(ls, dt, in), x, l.ReturnSequences, l.Dynamic)
}

// NewCell makes (or, in a scope that reuses variables, finds) the layer's
// variables for inputs of the given features, and returns its step: for a
// loop built by hand over Cell.Step, or Unroll with an initial state. Nil
// after a build error, recorded in s.
func (l LSTM) NewCell(s *graph.Scope, dt tensor.DType, features int) *LSTMCell {
	if !dt.IsFloat() || features <= 0 || l.Units <= 0 {
		s.SetErr(fmt.Errorf("layers: LSTM: want a float dtype, features and Units positive; got %v, %d and %d", dt, features, l.Units))
		return nil
	}
	return l.newCell(layerScope(s, l.Name, "lstm"), dt, features)
}

func (l LSTM) newCell(ls *graph.Scope, dt tensor.DType, in int) *LSTMCell {
	u := l.Units
	c := &LSTMCell{units: u, activation: orActivation(l.Activation, ops.Tanh), recurrentActivation: orActivation(l.RecurrentActivation, ops.Sigmoid)}
	kernel := variable(ls, "kernel", dt, []int{in, 4 * u}, l.KernelInit, l.KernelRegularizer)
	rec := variable(ls, "recurrent_kernel", dt, []int{u, 4 * u}, l.orthogonal(ls), l.RecurrentRegularizer)
	if kernel == nil || rec == nil {
		return nil
	}
	c.kernel, c.recurrent = kernel.Value(), rec.Value()
	if !l.NoBias {
		init := orZeros(l.BiasInit)
		if !l.NoUnitForgetBias {
			init = unitForgetBias(init, u)
		}
		bias := variable(ls, "bias", dt, []int{4 * u}, init, nil)
		if bias == nil {
			return nil
		}
		c.bias = bias.Value()
	}
	return c
}

func (l LSTM) orthogonal(ls *graph.Scope) ops.Initializer {
	if l.RecurrentInit != nil {
		return l.RecurrentInit
	}
	return OrthogonalInit(1, seedFor(ls, ls.VariablePrefix()+"recurrent_kernel"))
}

// unitForgetBias is Keras' LSTM bias initializer with unit_forget_bias:
// init's values for the i, c and o gates, ones for the forget gate.
func unitForgetBias(init ops.Initializer, units int) ops.Initializer {
	return func(s *graph.Scope, dt tensor.DType, shape []int) graph.Output {
		return ops.Concat(s, 0, init(s, dt, []int{units}), ops.OnesInit()(s, dt, []int{units}), init(s, dt, []int{2 * units}))
	}
}

// LSTMCell is the step of an LSTM layer (LSTM.NewCell). Its state is
// [h, c].
type LSTMCell struct {
	units                           int
	kernel, recurrent, bias         graph.Output
	activation, recurrentActivation Activation
}

// StateSizes implements Cell: h and c.
func (c *LSTMCell) StateSizes() []int { return []int{c.units, c.units} }

// Step implements Cell.
func (c *LSTMCell) Step(s *graph.Scope, x graph.Output, state []graph.Output) (graph.Output, []graph.Output) {
	if len(state) != 2 {
		s.SetErr(fmt.Errorf("layers: LSTMCell: %d state tensors; want 2 (h and c)", len(state)))
		return graph.Output{}, nil
	}
	h, cell := state[0], state[1]
	z := ops.Add(s, ops.MatMul(s, x, c.kernel, false, false), ops.MatMul(s, h, c.recurrent, false, false))
	if c.bias.Valid() {
		z = ops.BiasAdd(s, z, c.bias)
	}
	g := ops.Split(s, z, 1, 4)
	i := c.recurrentActivation(s, g[0])
	f := c.recurrentActivation(s, g[1])
	o := c.recurrentActivation(s, g[3])
	cell = ops.Add(s, ops.Mul(s, f, cell), ops.Mul(s, i, c.activation(s, g[2])))
	h = ops.Mul(s, o, c.activation(s, cell))
	return h, []graph.Output{h, cell}
}

// GRU is a gated recurrent unit layer over [batch, time, features], as
// tf.keras.layers.GRU(units, activation, recurrent_activation, use_bias,
// reset_after, return_sequences): the gates z (update), r (reset) and the
// candidate h̃, in that order along the kernels' columns, and
//
//	h' = z⊙h + (1-z)⊙h̃,  h̃ = activation(x·W_h + (r⊙h)·U_h + b_h),
//
// with z, r = recurrent_activation(x·W + h·U + b). With ResetAfter the
// reset gate applies after the recurrent product, h̃ = activation(x·W_h +
// b_h + r⊙(h·U_h + b'_h)) (Keras' reset_after=True, CuDNN's form), and
// the bias holds both the input bias b and the recurrent bias b'. Its
// variables are "<name>/kernel" [features, 3·Units],
// "<name>/recurrent_kernel" [Units, 3·Units] and "<name>/bias" [3·Units]
// ([2, 3·Units] with ResetAfter). The state starts at zeros; the time steps
// are unrolled, so their number must be known at build time, unless
// Dynamic runs them in a graph loop.
type GRU struct {
	// Units is the size of the output and of the state (required).
	Units int
	// Activation is applied to the candidate (nil: tanh, as Keras'; unlike
	// Dense, nil is not the identity here). RecurrentActivation is applied
	// to the gates (nil: sigmoid).
	Activation, RecurrentActivation Activation
	// NoBias leaves the bias out (use_bias=False).
	NoBias bool
	// ResetAfter applies the reset gate after the recurrent product.
	ResetAfter bool
	// KernelInit initialises the input kernel (nil: Glorot uniform),
	// RecurrentInit the recurrent kernel (nil: OrthogonalInit(1)), BiasInit
	// the bias (nil: zeros).
	KernelInit, RecurrentInit, BiasInit ops.Initializer
	// KernelRegularizer and RecurrentRegularizer add penalties of the
	// kernels to the regularization losses (nil: none).
	KernelRegularizer, RecurrentRegularizer Regularizer
	// ReturnSequences returns every step's output [batch, time, Units]
	// instead of the last one [batch, Units].
	ReturnSequences bool
	// Dynamic runs the time steps in a loop of the graph (DynamicUnroll)
	// rather than unrolling them (Unroll): their number may then be
	// unknown at build time, and the graph does not grow with it.
	Dynamic bool
	// Name names the layer's scope (default "gru", made unique).
	Name string
}

// Apply implements Layer.
func (g GRU) Apply(s *graph.Scope, x graph.Output, _ bool) graph.Output {
	dt, in, ok := recurrentInput(s, "GRU", x, g.Units)
	if !ok {
		return graph.Output{}
	}
	ls := layerScope(s, g.Name, "gru")
	return recurrentRun(ls, g.newCell(ls, dt, in), x, g.ReturnSequences, g.Dynamic)
}

// NewCell makes (or, in a scope that reuses variables, finds) the layer's
// variables for inputs of the given features, and returns its step. Nil
// after a build error, recorded in s.
func (g GRU) NewCell(s *graph.Scope, dt tensor.DType, features int) *GRUCell {
	if !dt.IsFloat() || features <= 0 || g.Units <= 0 {
		s.SetErr(fmt.Errorf("layers: GRU: want a float dtype, features and Units positive; got %v, %d and %d", dt, features, g.Units))
		return nil
	}
	return g.newCell(layerScope(s, g.Name, "gru"), dt, features)
}

func (g GRU) newCell(ls *graph.Scope, dt tensor.DType, in int) *GRUCell {
	u := g.Units
	c := &GRUCell{units: u, activation: orActivation(g.Activation, ops.Tanh),
		recurrentActivation: orActivation(g.RecurrentActivation, ops.Sigmoid), resetAfter: g.ResetAfter}
	recInit := g.RecurrentInit
	if recInit == nil {
		recInit = OrthogonalInit(1, seedFor(ls, ls.VariablePrefix()+"recurrent_kernel"))
	}
	kernel := variable(ls, "kernel", dt, []int{in, 3 * u}, g.KernelInit, g.KernelRegularizer)
	rec := variable(ls, "recurrent_kernel", dt, []int{u, 3 * u}, recInit, g.RecurrentRegularizer)
	if kernel == nil || rec == nil {
		return nil
	}
	c.kernel, c.recurrent = kernel.Value(), rec.Value()
	if !g.NoBias {
		shape := []int{3 * u}
		if g.ResetAfter {
			shape = []int{2, 3 * u}
		}
		bias := variable(ls, "bias", dt, shape, orZeros(g.BiasInit), nil)
		if bias == nil {
			return nil
		}
		c.inputBias = bias.Value()
		if g.ResetAfter {
			b := ops.Split(ls, bias.Value(), 0, 2)
			c.inputBias = ops.Squeeze(ls, b[0], 0)
			c.recurrentBias = ops.Squeeze(ls, b[1], 0)
		}
	}
	if !g.ResetAfter {
		// The candidate's recurrent product comes after the reset gate, so
		// the recurrent kernel is used in two parts: [U_z U_r] and U_h.
		c.recurrentZR = ops.Slice(ls, c.recurrent, []int{0, 0}, []int{-1, 2 * u})
		c.recurrentH = ops.Slice(ls, c.recurrent, []int{0, 2 * u}, []int{-1, -1})
	}
	return c
}

// GRUCell is the step of a GRU layer (GRU.NewCell). Its state is [h].
type GRUCell struct {
	units                           int
	kernel, recurrent               graph.Output
	recurrentZR, recurrentH         graph.Output // the parts of recurrent, without ResetAfter
	inputBias, recurrentBias        graph.Output // recurrentBias only with ResetAfter
	activation, recurrentActivation Activation
	resetAfter                      bool
}

// StateSizes implements Cell: h.
func (c *GRUCell) StateSizes() []int { return []int{c.units} }

// Step implements Cell.
func (c *GRUCell) Step(s *graph.Scope, x graph.Output, state []graph.Output) (graph.Output, []graph.Output) {
	if len(state) != 1 {
		s.SetErr(fmt.Errorf("layers: GRUCell: %d state tensors; want 1 (h)", len(state)))
		return graph.Output{}, nil
	}
	h := state[0]
	xw := ops.MatMul(s, x, c.kernel, false, false)
	if c.inputBias.Valid() {
		xw = ops.BiasAdd(s, xw, c.inputBias)
	}
	xg := ops.Split(s, xw, 1, 3)
	var z, r, candidate graph.Output
	if c.resetAfter {
		hu := ops.MatMul(s, h, c.recurrent, false, false)
		if c.recurrentBias.Valid() {
			hu = ops.BiasAdd(s, hu, c.recurrentBias)
		}
		hg := ops.Split(s, hu, 1, 3)
		z = c.recurrentActivation(s, ops.Add(s, xg[0], hg[0]))
		r = c.recurrentActivation(s, ops.Add(s, xg[1], hg[1]))
		candidate = ops.Add(s, xg[2], ops.Mul(s, r, hg[2]))
	} else {
		hg := ops.Split(s, ops.MatMul(s, h, c.recurrentZR, false, false), 1, 2)
		z = c.recurrentActivation(s, ops.Add(s, xg[0], hg[0]))
		r = c.recurrentActivation(s, ops.Add(s, xg[1], hg[1]))
		candidate = ops.Add(s, xg[2], ops.MatMul(s, ops.Mul(s, r, h), c.recurrentH, false, false))
	}
	candidate = c.activation(s, candidate)
	// h' = z⊙h + (1-z)⊙h̃ = h̃ + z⊙(h - h̃).
	h = ops.Add(s, candidate, ops.Mul(s, z, ops.Sub(s, h, candidate)))
	return h, []graph.Output{h}
}

// orActivation is a, or def when nil.
func orActivation(a, def Activation) Activation {
	if a == nil {
		return def
	}
	return a
}
