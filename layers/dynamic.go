package layers

import (
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
)

// DynamicUnroll applies cell to each time step of x [batch, time,
// features] in a loop run by the graph (ops.WhileLoop), as TensorFlow's
// dynamic_rnn: the number of time steps may be known only at run time, and
// the graph holds one copy of the step however long the sequences are. It
// starts from the state initial (nil: zeros) and returns every step's
// output stacked, [batch, time, units], when returnSequences is set, else
// the last step's output [batch, units]; and the final state. A sequence
// of no time steps returns zeros and the initial state. After a build
// error (recorded in s) it returns the zero Output and nil.
//
// Its gradient reruns each step backwards (package grad's While gradient),
// so a training step costs about one more forward pass than Unroll's; the
// loop runs whole on one device.
func DynamicUnroll(s *graph.Scope, cell Cell, x graph.Output, initial []graph.Output, returnSequences bool) (graph.Output, []graph.Output) {
	if s.Err() != nil {
		return graph.Output{}, nil
	}
	sh := x.Shape()
	if !x.Valid() || !sh.KnownRank() || sh.Rank() != 3 || sh.Dim(2) < 0 {
		s.SetErr(fmt.Errorf("layers: DynamicUnroll: input %s has shape %v; want [batch, time, features] with the features known at build time", x, sh))
		return graph.Output{}, nil
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
		s.SetErr(fmt.Errorf("layers: DynamicUnroll: %d initial state tensors for a cell with %d", len(state), len(sizes)))
		return graph.Output{}, nil
	}
	units := sizes[0]
	shape := ops.Shape(s, x)
	steps := ops.Reshape(s, ops.Slice(s, shape, []int{1}, []int{1}), ops.Const(s, []int32{}))
	// The loop carries the step t, the outputs so far ([batch, time,
	// units], zeros where not yet written) or the last output, and the
	// state; each keeps its shape, as the loop's gradient needs.
	var out graph.Output
	if returnSequences {
		// Zeros [batch, time, 1] times ones [units]: the broadcast keeps
		// units in the static shape, whichever of batch and time are known.
		column := ops.ZerosLike(s, ops.Slice(s, x, []int{0, 0, 0}, []int{-1, -1, 1}))
		out = ops.Mul(s, column, ops.Fill(s, ops.Const(s, []int{units}), ops.Scalar(s, x.DType(), 1)))
	} else {
		out = zeroState(s, x, units)
	}
	init := append([]graph.Output{ops.Const(s, int32(0)), out}, state...)
	cond := func(cs *graph.Scope, v []graph.Output) graph.Output { return ops.Less(cs, v[0], steps) }
	body := func(bs *graph.Scope, v []graph.Output) []graph.Output {
		t := v[0]
		xt := ops.Gather(bs, x, t, 1) // [batch, features]
		y, next := cell.Step(bs, xt, v[2:])
		if bs.Err() != nil {
			return make([]graph.Output, len(v))
		}
		if returnSequences {
			y = ops.Add(bs, v[1], writeAt(bs, y, t, ops.Shape(bs, v[1])))
		}
		return append([]graph.Output{ops.Add(bs, t, ops.Const(bs, int32(1))), y}, next...)
	}
	res := ops.WhileLoop(s, cond, body, init)
	if s.Err() != nil {
		return graph.Output{}, nil
	}
	return res[1], res[2:]
}

// writeAt returns zeros of shape (1-D int32, [batch, time, units]) holding
// y [batch, units] at time step t (an int32 scalar): the adjoint of reading
// step t, whose gradient reads it back.
func writeAt(s *graph.Scope, y, t, shape graph.Output) graph.Output {
	t1 := ops.Reshape(s, t, ops.Const(s, []int32{1}))
	zero := ops.Const(s, []int32{0})
	begin := ops.Concat(s, 0, zero, t1, zero)
	end := ops.Concat(s, 0, zero, ops.Add(s, t1, ops.Const(s, []int32{1})), zero)
	strides := ops.Const(s, []int32{1, 1, 1})
	// Axes 0 and 2 are taken whole (begin and end masks); axis 1 is [t, t+1).
	return ops.StridedSliceGrad(s, shape, begin, end, strides, ops.ExpandDims(s, y, 1),
		ops.StridedBeginMask(0b101), ops.StridedEndMask(0b101))
}

// recurrentDynamic is recurrentApply over a graph loop.
func recurrentDynamic(s *graph.Scope, cell Cell, x graph.Output, returnSequences bool) graph.Output {
	if cell == nil || s.Err() != nil {
		return graph.Output{}
	}
	out, _ := DynamicUnroll(s, cell, x, nil, returnSequences)
	return out
}

// recurrentRun runs cell over x, unrolled or in a graph loop.
func recurrentRun(s *graph.Scope, cell Cell, x graph.Output, returnSequences, dynamic bool) graph.Output {
	if dynamic {
		return recurrentDynamic(s, cell, x, returnSequences)
	}
	return recurrentApply(s, cell, x, returnSequences)
}
