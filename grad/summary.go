package grad

// The summary ops (op/summary.go) output serialised protos, not functions of
// their inputs that training could follow.
func init() {
	RegisterNone("ScalarSummary", "its output is a serialised summary proto")
	RegisterNone("HistogramSummary", "its output is a serialised summary proto")
	RegisterNone("MergeSummary", "its output is a serialised summary proto")
}
