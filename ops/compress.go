package ops

import "github.com/distflow/distflow/graph"

// Builders of gradient compression (op/compress.go).

// TopKCompress is error-feedback top-k compression of a float32 gradient
// (any shape) for the push to a parameter server. The node keeps a
// residual of the gradient's size; each step it adds gradient to it and
// returns the k = topk.Count(ratio, n) entries of largest magnitude of
// the sum (n the gradient's element count, ratio a float32 scalar in
// (0, 1]; k is min(max(int(ratio*n), 1), n), with ratio*n rounded up when
// within float32 rounding of an integer): indices (int32, ascending, into the flattened gradient) and
// values (float32), both 1-D. What it does not send stays in the residual
// for the next steps, so that over the steps every part of the gradients
// is sent. Fewer than k come back when the sum has fewer than k non-zero
// entries, and, past 65536 entries, when the threshold estimated on a
// sample overshoots (see topk.Selector).
//
// The residual belongs to the kernel of the node in one executor: a
// session keeps one per set of fetches and targets, a worker one per
// registered graph. Place the node where the gradient is computed (the
// worker), so that only indices and values cross to the ps, and rebuild the
// dense gradient there:
//
//	idx, vals := ops.TopKCompress(worker, grad, ops.Scalar(worker, tensor.Float32, 0.01))
//	n := ops.Scalar(ps, tensor.Int32, float64(shape.NumElements())) // or ops.Size(worker, grad)
//	dense := ops.ReshapeTo(ps, ops.UnsortedSegmentSum(ps, vals, idx, n), shape.Dims()...)
//
// A step fails, leaving the residual as it was, on a gradient with a NaN or
// infinite entry, on a sum that overflows float32, on a ratio outside
// (0, 1], and on a gradient whose element count differs from the first
// step's. The op has no gradient.
func TopKCompress(s *graph.Scope, gradient, ratio graph.Output) (indices, values graph.Output) {
	n := s.AddNode("TopKCompress", "TopKCompress", []graph.Output{gradient, ratio}, nil)
	if n == nil {
		return graph.Output{}, graph.Output{}
	}
	return n.Output(0), n.Output(1)
}
