package rpc

import (
	"bytes"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/service"
)

// runGraphRequests decodes the RunGraph requests one responder serves. A
// master sends a task the same request at every step but for the step's
// id, so the decoder keeps the last request's fields and hands them out
// again when the bytes around the step id are the same: serving a step
// then decodes no strings and allocates nothing. A request with feeds,
// whose values change from step to step, is decoded in full into a
// message of its own.
type runGraphRequests struct {
	key  []byte             // the last request's bytes without its step id
	last pb.RunGraphRequest // decoded from key's request; never changed once made
	req  pb.RunGraphRequest // what the service gets: last's fields, and the step id
	// The response of a service.RunnerInto, whose fetch entries serve
	// again at the next step.
	resp pb.RunGraphResponse
}

// decode returns body's request. Unless it has feeds, the request is the
// decoder's own, valid until the next call of decode or done.
func (d *runGraphRequests) decode(body []byte) (*pb.RunGraphRequest, error) {
	from, to, step, ok := stepIDField(body)
	if !ok { // feeds, or fields stepIDField does not know
		in := new(pb.RunGraphRequest)
		return in, proto.Unmarshal(body, in)
	}
	if len(d.key) != len(body)-(to-from) || !bytes.Equal(d.key[:from], body[:from]) || !bytes.Equal(d.key[from:], body[to:]) {
		d.key = d.key[:0]
		d.last = pb.RunGraphRequest{}
		if err := proto.Unmarshal(body, &d.last); err != nil {
			return nil, err
		}
		d.key = append(append(d.key, body[:from]...), body[to:]...)
	}
	d.req = pb.RunGraphRequest{SessionHandle: d.last.SessionHandle, GraphHandle: d.last.GraphHandle,
		StepId: step, Fetches: d.last.Fetches, Targets: d.last.Targets, Trace: d.last.Trace}
	return &d.req, nil
}

// done drops what the last request and its response refer to, once
// answered.
func (d *runGraphRequests) done() {
	d.req = pb.RunGraphRequest{}
	service.ForgetResponse(&d.resp)
}

// stepIDField finds the step id field of a serialised RunGraphRequest:
// its bytes are body[from:to], its value step. ok is false when body has
// feeds, more than one step id, a field this version does not know or
// bytes that do not parse (proto.Unmarshal then says what is wrong).
func stepIDField(body []byte) (from, to int, step int64, ok bool) {
	from = -1
	for at := 0; at < len(body); {
		num, typ, n := protowire.ConsumeTag(body[at:])
		if n < 0 {
			return 0, 0, 0, false
		}
		m := protowire.ConsumeFieldValue(num, typ, body[at+n:])
		if m < 0 {
			return 0, 0, 0, false
		}
		switch {
		case num == 3 && typ == protowire.VarintType && from < 0: // step_id
			v, _ := protowire.ConsumeVarint(body[at+n:])
			from, to, step = at, at+n+m, int64(v)
		case (num == 1 || num == 2 || num == 5 || num == 6) && typ == protowire.BytesType,
			num == 7 && typ == protowire.VarintType:
		default: // feeds (4), a second step id, or unknown
			return 0, 0, 0, false
		}
		at += n + m
	}
	if from < 0 { // step 0: the field is left out
		from, to = len(body), len(body)
	}
	return from, to, step, true
}
