package summary

import (
	"errors"
	"fmt"
	"io"
	"os"

	pb "github.com/distflow/distflow/proto/distflowpb"
	"google.golang.org/protobuf/proto"
)

// ReadEvents decodes the events framed in r. On a truncated, corrupt or
// undecodable record it returns the events before it with an error (wrapping
// ErrTruncated or ErrCorrupt for framing faults): a file being written ends
// in a truncated record that a later read may find complete.
func ReadEvents(r io.Reader) ([]*pb.Event, error) {
	rr := NewRecordReader(r)
	var events []*pb.Event
	for {
		off := rr.Offset()
		data, err := rr.Next()
		if errors.Is(err, io.EOF) {
			return events, nil
		}
		if err != nil {
			return events, err
		}
		e := &pb.Event{}
		if err := proto.Unmarshal(data, e); err != nil {
			return events, fmt.Errorf("summary: record at offset %d: %w: event: %v", off, ErrCorrupt, err)
		}
		events = append(events, e)
	}
}

// ReadFile reads the events of an event file (see ReadEvents); errors name the file.
func ReadFile(path string) ([]*pb.Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("summary: read events: %w", err)
	}
	defer f.Close()
	events, err := ReadEvents(f)
	if err != nil {
		return events, fmt.Errorf("summary: %s: %w", path, err)
	}
	return events, nil
}
