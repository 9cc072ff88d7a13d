package ops

import (
	"fmt"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/tensor"
)

// Builders of the sync family: conditional accumulators and FIFO queues.
// The resource builders return a handle; every builder that uses a handle
// places its node on the handle's device, where the resource lives (the
// kernels find the resource through the handle's producer, so they must run
// beside it).

// ConditionalAccumulator adds an accumulator of gradients of dtype dt and
// the given shape (tensor.UnknownShape() for any). Replicas that build the
// same accumulator (same node name, or same non-empty sharedName) on the
// same task share it.
func ConditionalAccumulator(s *graph.Scope, dt tensor.DType, shape tensor.Shape, sharedName string) graph.Output {
	return s.Out("ConditionalAccumulator", "ConditionalAccumulator", nil,
		map[string]any{"dtype": dt, "shape": shape, "shared_name": sharedName})
}

// AccumulatorApplyGradient adds grad to the accumulator if localStep (int64
// scalar) is at least the accumulator's global step, and otherwise drops it
// as stale (counted by AccumulatorNumDropped).
func AccumulatorApplyGradient(s *graph.Scope, handle, localStep, grad graph.Output) *graph.Node {
	return syncColocate(s, handle).AddNode("AccumulatorApplyGradient", "AccumulatorApplyGradient",
		[]graph.Output{handle, localStep, grad}, nil)
}

// AccumulatorTakeGradient waits until numRequired (int32 scalar) gradients
// are accumulated and returns their mean, with the number of gradients
// offered (accepted or dropped) since the previous take; it resets the
// accumulator and advances its global step by one.
func AccumulatorTakeGradient(s *graph.Scope, handle, numRequired graph.Output) (mean, offered graph.Output) {
	if handle.Node == nil {
		s.SetErr(syncMissing("AccumulatorTakeGradient"))
		return graph.Output{}, graph.Output{}
	}
	n := syncColocate(s, handle).AddNode("AccumulatorTakeGradient", "AccumulatorTakeGradient",
		[]graph.Output{handle, numRequired},
		map[string]any{"dtype": handle.Node.AttrDType("dtype"), "shape": handle.Node.AttrShape("shape")})
	if n == nil {
		return graph.Output{}, graph.Output{}
	}
	return n.Output(0), n.Output(1)
}

// SparseConditionalAccumulator adds an accumulator of indexed slices of
// dtype dt whose dense shape is shape (rows first; tensor.UnknownShape()
// for any): its state is only the rows the gradients of a round touch.
// AccumulatorNumAccumulated, AccumulatorNumDropped and
// AccumulatorSetGlobalStep take its handle too. Sharing as for
// ConditionalAccumulator.
func SparseConditionalAccumulator(s *graph.Scope, dt tensor.DType, shape tensor.Shape, sharedName string) graph.Output {
	return s.Out("SparseConditionalAccumulator", "SparseConditionalAccumulator", nil,
		map[string]any{"dtype": dt, "shape": shape, "shared_name": sharedName})
}

// SparseAccumulatorApplyGradient adds the indexed slices (indices: 1-D
// int32 or int64; values: one row per index; denseShape: 1-D int32 or
// int64) to the sparse accumulator if localStep (int64 scalar) is at least
// its global step, and otherwise drops them as stale. Repeated indices add
// up.
func SparseAccumulatorApplyGradient(s *graph.Scope, handle, localStep, indices, values, denseShape graph.Output) *graph.Node {
	return syncColocate(s, handle).AddNode("SparseAccumulatorApplyGradient", "SparseAccumulatorApplyGradient",
		[]graph.Output{handle, localStep, indices, values, denseShape}, nil)
}

// SparseAccumulatorTakeGradient waits until numRequired (int32 scalar)
// gradients are accumulated and returns their mean as indexed slices: the
// distinct rows touched in ascending order (int64), their values (each
// row's sum divided by the number of gradients, as the dense accumulator's
// mean), and the dense shape (int64); with the number of gradients offered
// since the previous take. It resets the accumulator and advances its
// global step by one.
func SparseAccumulatorTakeGradient(s *graph.Scope, handle, numRequired graph.Output) (indices, values, denseShape, offered graph.Output) {
	if handle.Node == nil {
		s.SetErr(syncMissing("SparseAccumulatorTakeGradient"))
		return
	}
	n := syncColocate(s, handle).AddNode("SparseAccumulatorTakeGradient", "SparseAccumulatorTakeGradient",
		[]graph.Output{handle, numRequired},
		map[string]any{"dtype": handle.Node.AttrDType("dtype"), "shape": handle.Node.AttrShape("shape")})
	if n == nil {
		return
	}
	return n.Output(0), n.Output(1), n.Output(2), n.Output(3)
}

// AccumulatorNumAccumulated returns the number of gradients accumulated
// since the last take (int32 scalar).
func AccumulatorNumAccumulated(s *graph.Scope, handle graph.Output) graph.Output {
	return syncColocate(s, handle).Out("AccumulatorNumAccumulated", "AccumulatorNumAccumulated", []graph.Output{handle}, nil)
}

// AccumulatorNumDropped returns the number of stale gradients the
// accumulator has dropped (int64 scalar).
func AccumulatorNumDropped(s *graph.Scope, handle graph.Output) graph.Output {
	return syncColocate(s, handle).Out("AccumulatorNumDropped", "AccumulatorNumDropped", []graph.Output{handle}, nil)
}

// AccumulatorSetGlobalStep sets the accumulator's global step (int64 scalar).
func AccumulatorSetGlobalStep(s *graph.Scope, handle, step graph.Output) *graph.Node {
	return syncColocate(s, handle).AddNode("AccumulatorSetGlobalStep", "AccumulatorSetGlobalStep", []graph.Output{handle, step}, nil)
}

// FIFOQueue adds a queue of dt tensors holding at most capacity elements
// (-1: unbounded). Replicas that build the same queue (same node name, or
// same non-empty sharedName) on the same task share it.
func FIFOQueue(s *graph.Scope, dt tensor.DType, capacity int, sharedName string) graph.Output {
	return s.Out("FIFOQueue", "FIFOQueue", nil, map[string]any{"dtype": dt, "capacity": capacity, "shared_name": sharedName})
}

// QueueEnqueueMany enqueues values[0], values[1], ..., waiting for room.
func QueueEnqueueMany(s *graph.Scope, handle, values graph.Output) *graph.Node {
	return syncColocate(s, handle).AddNode("QueueEnqueueMany", "QueueEnqueueMany", []graph.Output{handle, values}, nil)
}

// QueueDequeue removes and returns the first element of the queue, of
// shape elem (tensor.UnknownShape() if not known), waiting for one. It
// fails with an error wrapping cpu.ErrQueueClosed once the queue is closed
// and empty.
func QueueDequeue(s *graph.Scope, handle graph.Output, elem tensor.Shape) graph.Output {
	if handle.Node == nil {
		s.SetErr(syncMissing("QueueDequeue"))
		return graph.Output{}
	}
	return syncColocate(s, handle).Out("QueueDequeue", "QueueDequeue", []graph.Output{handle},
		map[string]any{"dtype": handle.Node.AttrDType("dtype"), "shape": elem})
}

// QueueSize returns the number of elements in the queue (int32 scalar).
func QueueSize(s *graph.Scope, handle graph.Output) graph.Output {
	return syncColocate(s, handle).Out("QueueSize", "QueueSize", []graph.Output{handle}, nil)
}

// QueueClose closes the queue: later enqueues fail, and dequeues fail once
// it is empty (those waiting wake up). With cancelPending, enqueues waiting
// for room fail too.
func QueueClose(s *graph.Scope, handle graph.Output, cancelPending bool) *graph.Node {
	return syncColocate(s, handle).AddNode("QueueClose", "QueueClose", []graph.Output{handle},
		map[string]any{"cancel_pending_enqueues": cancelPending})
}

// syncColocate returns s placed on the device of handle's producer.
func syncColocate(s *graph.Scope, handle graph.Output) *graph.Scope {
	if handle.Node == nil || handle.Node.Device() == "" {
		return s
	}
	return s.WithDevice(handle.Node.Device())
}

func syncMissing(op string) error {
	return fmt.Errorf("ops: %s: the resource handle is missing", op)
}
