package ops

import (
	"github.com/distflow/distflow/graph"
)

// SummariesCollection lists the summary nodes made by ScalarSummary and
// HistogramSummary; MergeAllSummaries merges them.
const SummariesCollection = "summaries"

// ScalarSummary adds a node whose output, a 1-D uint8 tensor, is a
// serialised TensorBoard Summary holding the numeric scalar x under tag (as
// float32), and records it in SummariesCollection. Fetch it and pass the
// bytes to summary.Writer.AddSummary.
func ScalarSummary(s *graph.Scope, tag string, x graph.Output) graph.Output {
	return summaryAdd(s, s.Out("ScalarSummary", "ScalarSummary", []graph.Output{x}, map[string]any{"tag": tag}))
}

// HistogramSummary is ScalarSummary for the histogram of the numeric values
// (any shape). Running it fails on a NaN or infinite value.
func HistogramSummary(s *graph.Scope, tag string, values graph.Output) graph.Output {
	return summaryAdd(s, s.Out("HistogramSummary", "HistogramSummary", []graph.Output{values}, map[string]any{"tag": tag}))
}

// MergeSummary returns one serialised Summary holding the values of all the
// given ones (outputs of summary ops); a tag present twice fails at run time.
func MergeSummary(s *graph.Scope, summaries ...graph.Output) graph.Output {
	return s.Out("MergeSummary", "MergeSummary", summaries, nil)
}

// MergeAllSummaries merges every summary in SummariesCollection. With none
// it returns the zero Output (Valid reports false) and records no error, so
// that a caller can skip fetching it.
func MergeAllSummaries(s *graph.Scope) graph.Output {
	nodes := s.Graph().Collection(SummariesCollection)
	if len(nodes) == 0 || s.Err() != nil {
		return graph.Output{}
	}
	outs := make([]graph.Output, len(nodes))
	for i, n := range nodes {
		outs[i] = n.Output(0)
	}
	return MergeSummary(s, outs...)
}

func summaryAdd(s *graph.Scope, out graph.Output) graph.Output {
	if out.Valid() {
		s.Graph().AddToCollection(SummariesCollection, out.Node)
	}
	return out
}
