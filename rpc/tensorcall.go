package rpc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/distflow/distflow/internal/stepctx"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/service"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/worker"
)

// Calls on the tensor channel (version 1.1): RunGraph and CleanupStep, the
// two calls a master makes to every remote task at every step, travel as
// a serialised request and response on a pooled channel connection, as
// RecvTensor does; see the protocol in tensorchan.go. The peer's service,
// its authentication (Options.Authenticate, Identify with the gRPC
// method's name) and its errors are those of the gRPC call. A request
// larger than maxCallBody, or a peer that does not offer version 1.1,
// goes over gRPC.

// maxCallBody is the largest serialised request sent as a call on the
// channel, leaving room in a request (maxRequestSize) for its metadata.
const maxCallBody = maxRequestSize - 64<<10

// methodNames are the short names of the channel's methods, as errors and
// metrics name them.
var methodNames = [numMethods]string{methodRecvTensor: "RecvTensor", methodRunGraph: "RunGraph", methodCleanupStep: "CleanupStep", methodRecvTensors: "RecvTensor"}

// errResponseTooLarge is wrapped by the error of a call whose response is
// larger than Options.MaxMessageBytes.
var errResponseTooLarge = errors.New("response larger than Options.MaxMessageBytes")

// serveCall answers rs's call; an error means the connection is broken.
func (s *Server) serveCall(ctx context.Context, rs *responder, w worker.Service) error {
	req := &rs.req
	full := methodStreams[req.method].method
	ctx, err := s.opts.admit(ctx, full)
	if err != nil {
		return rs.writeError(err)
	}
	var resp proto.Message
	defer rs.runGraphs.done() // answered: nothing of the step kept
	kind := byte(respCall)
	switch req.method {
	case methodRunGraph:
		var in *pb.RunGraphRequest
		if in, err = rs.runGraphs.decode(req.body); err == nil {
			// Into the responder's response, written out before the
			// next request.
			resp, err = &rs.runGraphs.resp, service.RunGraphInto(ctx, w, in, &rs.runGraphs.resp)
		}
		if f, ok := w.(worker.StepFinisher); ok && err == nil && f.FinishStep(in.GetStepId()) {
			kind = respCallFinished
		}
	case methodCleanupStep:
		in := new(pb.CleanupStepRequest)
		if err = proto.Unmarshal(req.body, in); err == nil {
			resp, err = w.CleanupStep(ctx, in)
		}
	default: // readRequestV refuses other methods
		err = fmt.Errorf("rpc: tensor channel method %d", req.method)
	}
	if err != nil {
		return rs.writeError(err)
	}
	hdr := append(rs.hdr, kind)
	at := len(hdr)
	hdr = binary.LittleEndian.AppendUint64(hdr, 0) // length, below
	hdr, err = (proto.MarshalOptions{}).MarshalAppend(hdr, resp)
	rs.hdr = hdr
	if err != nil {
		return rs.writeError(fmt.Errorf("rpc: %s response: %w", methodNames[req.method], err))
	}
	binary.LittleEndian.PutUint64(hdr[at:], uint64(len(hdr)-at-8))
	rs.bufs = append(rs.bufs, hdr)
	return rs.write(rs.connCtx)
}

// call makes a call of method (methodRunGraph, methodCleanupStep) for step
// on the channel, decoding the answer into resp. It returns errFallback
// when the call should go over gRPC instead: the peer does not offer
// version 1.1 of the channel, or the request is too large for it.
func (p *tensorPool) call(ctx context.Context, method int, step int64, req, resp proto.Message) error {
	p.mu.Lock()
	v10 := p.v10
	p.mu.Unlock()
	if v10 {
		return errFallback
	}
	size := proto.Size(req)
	if size > maxCallBody {
		return errFallback
	}
	name, full := methodNames[method], methodStreams[method].method
	var md map[string]string
	if pc := p.opts.PerRPCCredentials; pc != nil {
		if pc.RequireTransportSecurity() && p.tlsc == nil {
			return errFallback // gRPC reports the misconfiguration
		}
		var err error
		if md, err = pc.GetRequestMetadata(ctx, "https://"+p.addr+path.Dir(full)); err != nil {
			return fmt.Errorf("rpc: %s on %s: getting request credentials: %w", name, p.peer, err)
		}
	}
	c, err := p.get(ctx)
	if err != nil {
		return p.dialError(ctx, name, fmt.Sprintf("step %d", step), err)
	}
	if !c.v11 {
		p.put(c)
		return errFallback
	}
	start := time.Now()
	received, err := p.exchangeCall(ctx, c, method, step, md, req, resp)
	re, remote := asRemote(err)
	if err == nil || remote { // a whole answer: c can serve again
		p.countCall(method, time.Since(start), size, received)
		p.put(c)
		if err != nil {
			if cerr := ctx.Err(); cerr != nil && !errors.Is(re, cerr) {
				return fmt.Errorf("%w (%w)", re, cerr) // as fromStatus
			}
		}
		return err
	}
	c.conn.Close()
	return p.callError(ctx, name, fmt.Sprintf("step %d", step), err)
}

// exchangeCall sends a call on c and reads its answer into resp; it
// returns the size of the answer. A *RemoteError is the peer's answer,
// after which c is still usable.
func (p *tensorPool) exchangeCall(ctx context.Context, c *tensorClientConn, method int, step int64, md map[string]string, req, resp proto.Message) (int, error) {
	timeout, err := c.arm(ctx)
	if err != nil {
		return 0, err
	}
	defer c.disarm()
	var start int
	c.buf, start = beginRequest(c.buf[:0], method, step, timeout, "", md)
	// proto.Size in call left the request's size in its cache.
	if c.buf, err = (proto.MarshalOptions{UseCachedSize: true}).MarshalAppend(c.buf, req); err != nil {
		return 0, fmt.Errorf("%w: %v", tensor.ErrCorrupt, err)
	}
	c.buf = endRequest(c.buf, start)
	_, err = c.conn.Write(c.buf)
	if cap(c.buf) > maxReusedHeader {
		c.buf = nil
	}
	if err != nil {
		return 0, err
	}
	kind, err := p.readKind(c, methodNames[method])
	if err != nil {
		return 0, err
	}
	switch {
	case kind == respCall:
	case kind == respCallFinished && method == methodRunGraph:
		p.finished(step)
	default:
		return 0, fmt.Errorf("%w: unknown response kind %d", tensor.ErrCorrupt, kind)
	}
	if _, err := io.ReadFull(c.r, c.scratch[:8]); err != nil {
		return 0, err
	}
	n := binary.LittleEndian.Uint64(c.scratch[:8])
	if limit := uint64(p.opts.maxMessageBytes()); n > limit {
		return 0, fmt.Errorf("%w: %d bytes, limit %d", errResponseTooLarge, n, limit)
	}
	// The request's buffer, sent, takes the answer when it fits:
	// proto.Unmarshal copies what it keeps.
	b := c.buf[:0]
	if uint64(cap(b)) < n {
		b = make([]byte, n)
	}
	b = b[:n]
	if _, err := io.ReadFull(c.r, b); err != nil {
		return 0, err
	}
	if cap(b) <= maxReusedHeader {
		c.buf = b[:0]
	}
	if err := proto.Unmarshal(b, resp); err != nil {
		return 0, fmt.Errorf("%w: %s response: %v", tensor.ErrCorrupt, methodNames[method], err)
	}
	return int(n), nil
}

// arm makes a read or write on c fail once ctx ends (call disarm when the
// exchange is over), and returns the time ctx has left, 0 for no
// deadline. ctx's own timer ends it at its deadline, so the socket needs
// no deadline of its own: setting one at every exchange cost about 5% of
// a small remote step's CPU. A connection whose ctx ended during the
// exchange keeps a deadline in the past and is not reused. A
// *stepctx.Context (a step's, a request's: see Of) is watched with the
// connection's Hook, without an allocation; another context costs
// context.AfterFunc's (2, and ctx's Done channel and children at its
// first watch), which nothing cheaper replaces without losing a
// cancellation: a per-connection goroutine waiting on ctx would be woken
// at every exchange, and a socket deadline covers the deadline only.
func (c *tensorClientConn) arm(ctx context.Context) (timeout time.Duration, err error) {
	if d, ok := ctx.Deadline(); ok {
		if timeout = time.Until(d); timeout <= 0 {
			return 0, ctx.Err()
		}
	}
	if c.expire == nil {
		c.expire = c.setExpired // one method value for all its exchanges
	}
	if sc, ok := stepctx.Of(ctx); ok {
		c.watched = sc
		sc.Watch(&c.hook, c.expire)
		return timeout, nil
	}
	if ctx.Done() == nil {
		return timeout, nil // never ends: nothing to watch
	}
	c.stop = context.AfterFunc(ctx, c.expire)
	return timeout, nil
}

// disarm undoes arm.
func (c *tensorClientConn) disarm() {
	if c.watched != nil && !c.watched.Unwatch(&c.hook) {
		c.expired = true // the deadline in the past is set, or about to be
	}
	if c.stop != nil && !c.stop() {
		c.expired = true
	}
	c.watched, c.stop = nil, nil
}

func (c *tensorClientConn) setExpired() { c.conn.SetDeadline(time.Unix(1, 0)) }

// asRemote returns the *RemoteError err is or wraps, if any. Its variable
// escapes (errors.As), so that a caller's own would cost an allocation at
// every call, failed or not.
func asRemote(err error) (*RemoteError, bool) {
	if err == nil {
		return nil, false
	}
	var re *RemoteError
	ok := errors.As(err, &re)
	return re, ok
}

// countCall records a call made on the channel as its gRPC counterpart
// would be: the caller's latency and the serialised sizes.
func (p *tensorPool) countCall(method int, d time.Duration, sent, received int) {
	if p.callSeries[method] == nil {
		return
	}
	p.callSeries[method].Observe(d, sent, received)
}

// callResponseError maps errResponseTooLarge to the status gRPC gives a
// message over its limit.
func (p *tensorPool) callResponseError(method string, err error) *RemoteError {
	return &RemoteError{Peer: p.peer, Method: method, Code: codes.ResourceExhausted, Msg: err.Error()}
}

// finishedSteps is how many steps a pool remembers as finished by its
// peer (see finished): a master cleans a step up right after its RunGraph
// calls, so a few suffice; a step forgotten is cleaned up by a call.
const finishedSteps = 64

// finished records that the peer finished step (its RunGraph answer said
// so: see worker.StepFinisher), so that the step's CleanupStep without an
// abort reason needs no call (takeFinished).
func (p *tensorPool) finished(step int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.done) == finishedSteps {
		p.done = slices.Delete(p.done, 0, 1) // the oldest
	}
	p.done = append(p.done, step)
}

// takeFinished reports whether the peer finished step, and forgets it.
func (p *tensorPool) takeFinished(step int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	// From the newest: a step is cleaned up right after it ran.
	for i := len(p.done) - 1; i >= 0; i-- {
		if p.done[i] == step {
			p.done = slices.Delete(p.done, i, i+1)
			return true
		}
	}
	return false
}
