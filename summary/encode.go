package summary

import (
	"errors"
	"fmt"

	pb "github.com/distflow/distflow/proto/distflowpb"
	"google.golang.org/protobuf/proto"
)

// Serialised Summary protos are what the graph's summary ops output (as a
// uint8 tensor) and what Writer.AddSummary takes.

// Sentinel errors of the encoders.
var (
	// ErrEmptyTag reports a summary value without a tag.
	ErrEmptyTag = errors.New("empty tag")
	// ErrDuplicateTag reports two values with one tag in a merged summary.
	ErrDuplicateTag = errors.New("duplicate tag")
	// ErrBadSummary reports bytes that do not parse as a Summary proto.
	ErrBadSummary = errors.New("malformed Summary proto")
)

var marshal = proto.MarshalOptions{Deterministic: true}

// EncodeScalar returns the serialised Summary holding one scalar. TensorBoard
// stores scalars as float32: value is rounded to it.
func EncodeScalar(tag string, value float64) ([]byte, error) {
	if tag == "" {
		return nil, fmt.Errorf("summary: scalar: %w", ErrEmptyTag)
	}
	return marshal.Marshal(scalarSummary(tag, value))
}

// EncodeHistogram returns the serialised Summary holding the histogram of
// values (see NewHistogram).
func EncodeHistogram(tag string, values []float64) ([]byte, error) {
	if tag == "" {
		return nil, fmt.Errorf("summary: histogram: %w", ErrEmptyTag)
	}
	h, err := NewHistogram(values)
	if err != nil {
		return nil, fmt.Errorf("summary: histogram %q: %w", tag, err)
	}
	return marshal.Marshal(histogramSummary(tag, h))
}

// Merge returns one serialised Summary holding the values of all the given
// ones, in order. Two values with the same tag are an error wrapping
// ErrDuplicateTag; bytes that do not parse, one wrapping ErrBadSummary.
func Merge(summaries ...[]byte) ([]byte, error) {
	merged := &pb.Summary{}
	seen := map[string]int{}
	for i, b := range summaries {
		s, err := decodeSummary(b)
		if err != nil {
			return nil, fmt.Errorf("summary: merge input %d: %w", i, err)
		}
		for _, v := range s.GetValue() {
			if j, dup := seen[v.GetTag()]; dup {
				return nil, fmt.Errorf("summary: merge: tag %q in inputs %d and %d: %w", v.GetTag(), j, i, ErrDuplicateTag)
			}
			seen[v.GetTag()] = i
			merged.Value = append(merged.Value, v)
		}
	}
	return marshal.Marshal(merged)
}

func decodeSummary(b []byte) (*pb.Summary, error) {
	s := &pb.Summary{}
	if err := proto.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSummary, err)
	}
	return s, nil
}

func scalarSummary(tag string, value float64) *pb.Summary {
	return &pb.Summary{Value: []*pb.Summary_Value{{
		Tag:   tag,
		Value: &pb.Summary_Value_SimpleValue{SimpleValue: float32(value)},
	}}}
}

func histogramSummary(tag string, h *pb.HistogramProto) *pb.Summary {
	return &pb.Summary{Value: []*pb.Summary_Value{{
		Tag:   tag,
		Value: &pb.Summary_Value_Histo{Histo: h},
	}}}
}
