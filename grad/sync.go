package grad

// The sync ops (accumulators and queues) have no gradient.
func init() {
	for _, op := range []string{"ConditionalAccumulator", "SparseConditionalAccumulator", "FIFOQueue"} {
		RegisterNone(op, "its output is a resource handle")
	}
	for _, op := range []string{"AccumulatorApplyGradient", "SparseAccumulatorApplyGradient", "AccumulatorSetGlobalStep", "QueueEnqueueMany", "QueueClose"} {
		RegisterNone(op, "it only changes a resource and has no outputs")
	}
	for _, op := range []string{"AccumulatorNumAccumulated", "AccumulatorNumDropped", "QueueSize"} {
		RegisterNone(op, "its output is an integer count")
	}
	for _, op := range []string{"AccumulatorTakeGradient", "SparseAccumulatorTakeGradient"} {
		RegisterNone(op, "the mean of gradients gathered across steps is not a function of the step's inputs")
	}
	RegisterNone("QueueDequeue", "the element dequeued was enqueued by another step")
}
