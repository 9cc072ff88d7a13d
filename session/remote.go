package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/distflow/distflow/graph"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/service"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/trace"
)

// Dialer connects to the master of a target ("grpc://host:port") for Open.
// The io.Closer releases the connection; Session.Close calls it.
type Dialer func(ctx context.Context, target string) (service.Master, io.Closer, error)

var (
	rpcDialersMu sync.RWMutex
	rpcDialers   = map[string]Dialer{}
)

// RegisterDialer makes Open accept targets "scheme://...". Transports
// register themselves in their init, like database/sql drivers: package rpc
// registers "grpc", so a program blank-imports it:
//
//	import _ "github.com/distflow/distflow/rpc"
//
// It panics if scheme is empty or registered twice (a programmer error).
func RegisterDialer(scheme string, d Dialer) {
	rpcDialersMu.Lock()
	defer rpcDialersMu.Unlock()
	if scheme == "" || d == nil {
		panic("session: RegisterDialer with an empty scheme or a nil dialer")
	}
	if _, dup := rpcDialers[scheme]; dup {
		panic("session: RegisterDialer called twice for scheme " + scheme)
	}
	rpcDialers[scheme] = d
}

// Open returns a session on target: "" runs g in process (as New), and
// "scheme://address" (such as "grpc://127.0.0.1:2222") runs it on the
// master found there, through the Dialer registered for scheme. Dialing
// does not wait for the master; the first Run does, within its context.
func Open(ctx context.Context, target string, g *graph.Graph, opts ...Option) (*Session, error) {
	if target == "" {
		return New(g, opts...)
	}
	scheme, _, ok := strings.Cut(target, "://")
	if !ok {
		return nil, fmt.Errorf("session: target %q: want \"\" (local) or scheme://address", target)
	}
	rpcDialersMu.RLock()
	d := rpcDialers[scheme]
	rpcDialersMu.RUnlock()
	if d == nil {
		return nil, fmt.Errorf("session: target %q: no transport registered for scheme %q (for grpc, import _ \"github.com/distflow/distflow/rpc\")", target, scheme)
	}
	m, closer, err := d(ctx, target)
	if err != nil {
		return nil, fmt.Errorf("session: target %q: %w", target, err)
	}
	s, err := New(g, append(opts, func(s *Session) {
		s.remote = &rpcRemote{m: m, closer: closer, cfg: s.rpcConfig()}
	})...)
	if err != nil {
		if closer != nil {
			closer.Close()
		}
		return nil, err
	}
	return s, nil
}

// WithMaster makes the session run its steps through m (a service.Master,
// in process or an rpc client) instead of in process: the graph is sent to
// m on the first Run, the nodes added since are sent before later Runs, and
// Run and RunNamed behave as on the local back end. cfg may be nil.
func WithMaster(m service.Master, cfg *pb.SessionConfig) Option {
	return func(s *Session) {
		if cfg == nil {
			cfg = s.rpcConfig()
		}
		s.remote = &rpcRemote{m: m, cfg: cfg}
	}
}

// WithConfig sets the configuration of a remote session (device filters,
// default device, step timeout) for Open. Local sessions ignore it.
func WithConfig(cfg *pb.SessionConfig) Option {
	return func(s *Session) {
		s.rpcCfg = cfg
		if s.remote != nil {
			s.remote.cfg = cfg
		}
	}
}

func (s *Session) rpcConfig() *pb.SessionConfig {
	if s.rpcCfg != nil {
		return s.rpcCfg
	}
	return &pb.SessionConfig{}
}

// rpcRemote is the state of a session run by a master.
type rpcRemote struct {
	m      service.Master
	cfg    *pb.SessionConfig
	closer io.Closer // of the connection Open made, or nil

	mu      sync.Mutex // serialises shipping the graph
	handle  string
	version int // nodes of the graph the master holds

	requests sync.Pool // of *stepRequest
}

// stepRequest is a step's request to the master, with room for the feeds
// of most steps. A request goes from one step to the next (rpcRemote's
// pool): the master only reads it, before RunStep returns.
type stepRequest struct {
	req    pb.RunStepRequest
	feeds  [8]*pb.NamedTensor
	named  [8]pb.NamedTensor
	protos [8]pb.TensorProto
	dims   [32]int64
}

// fill makes sr's request feed vals to sig's feeds. The fed values go out
// as they are, not copied.
func (sr *stepRequest) fill(sig graph.Signature, vals []*tensor.Tensor) *pb.RunStepRequest {
	n := len(vals)
	feeds, named, protos := slices.Grow(sr.feeds[:0], n)[:n], slices.Grow(sr.named[:0], n)[:n], slices.Grow(sr.protos[:0], n)[:n]
	dims := sr.dims[:0]
	for i, f := range sig.Feeds {
		v, tp := vals[i], &protos[i]
		start := len(dims)
		for _, d := range v.Shape() {
			dims = append(dims, int64(d))
		}
		tp.Dtype, tp.Dims, tp.Content = pb.DataType(v.DType()), dims[start:len(dims):len(dims)], v.RawBytes()
		named[i].Name, named[i].Tensor = f.Name(), tp
		feeds[i] = &named[i]
	}
	sr.req.Feeds = feeds
	return &sr.req
}

// request returns a step request to fill; done takes it back.
func (r *rpcRemote) request() *stepRequest {
	if sr, ok := r.requests.Get().(*stepRequest); ok {
		return sr
	}
	return new(stepRequest)
}

// done takes sr back, keeping none of its step's values.
func (r *rpcRemote) done(sr *stepRequest) {
	clear(sr.protos[:])
	clear(sr.named[:])
	clear(sr.feeds[:])
	sr.req.Feeds, sr.req.Fetches, sr.req.Targets, sr.req.Options, sr.req.SessionHandle = nil, nil, nil, nil, ""
	r.requests.Put(sr)
}

// rpcGraphVersion is the GraphDef format version this build writes.
var rpcGraphVersion = graph.New().ToProto().GetVersion()

// ship sends the master the nodes it does not have yet: the whole graph
// with CreateSession on first use, then the added nodes with ExtendSession.
func (r *rpcRemote) ship(ctx context.Context, g *graph.Graph) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	nodes := g.Nodes()
	if r.handle == "" {
		gd := rpcGraphDef(nodes)
		for _, k := range g.CollectionKeys() {
			if gd.Collections == nil {
				gd.Collections = map[string]*pb.NameList{}
			}
			l := &pb.NameList{}
			for _, n := range g.Collection(k) {
				if n.ID() < len(nodes) {
					l.Names = append(l.Names, n.Name())
				}
			}
			gd.Collections[k] = l
		}
		resp, err := r.m.CreateSession(ctx, &pb.CreateSessionRequest{Graph: gd, Config: r.cfg})
		if err != nil {
			return "", fmt.Errorf("session: creating the remote session: %w", err)
		}
		r.handle, r.version = resp.GetSessionHandle(), len(nodes)
		return r.handle, nil
	}
	if len(nodes) > r.version {
		_, err := r.m.ExtendSession(ctx, &pb.ExtendSessionRequest{
			SessionHandle:       r.handle,
			Graph:               rpcGraphDef(nodes[r.version:]),
			CurrentGraphVersion: int64(r.version),
		})
		if err != nil {
			return "", fmt.Errorf("session: sending %d new nodes to the remote session: %w", len(nodes)-r.version, err)
		}
		r.version = len(nodes)
	}
	return r.handle, nil
}

// rpcGraphDef serialises nodes as graph.ToProto does.
func rpcGraphDef(nodes []*graph.Node) *pb.GraphDef {
	gd := &pb.GraphDef{Version: rpcGraphVersion, Node: make([]*pb.NodeDef, len(nodes))}
	for i, n := range nodes {
		nd := &pb.NodeDef{Name: n.Name(), Op: n.Op(), Device: n.Device(), Attr: map[string]*pb.AttrValue{}}
		for _, in := range n.Inputs() {
			nd.Input = append(nd.Input, in.Name())
		}
		for _, c := range n.ControlInputs() {
			nd.Input = append(nd.Input, "^"+c.Name())
		}
		for _, k := range n.AttrNames() {
			v, _ := n.Attr(k)
			nd.Attr[k] = graph.AttrToProto(v)
		}
		gd.Node[i] = nd
	}
	return gd
}

// runRemote runs one step on the master, which checks the signature and
// the feeds.
func (s *Session) runRemote(ctx context.Context, sig graph.Signature, vals []*tensor.Tensor) ([]*tensor.Tensor, error) {
	out, _, err := s.runRemoteTraced(ctx, sig, vals, false)
	return out, err
}

// runRemoteTraced is runRemote, asking the master for the step's timeline
// when traced (RunTraced) and putting it on this process's clock.
func (s *Session) runRemoteTraced(ctx context.Context, sig graph.Signature, vals []*tensor.Tensor, traced bool) ([]*tensor.Tensor, *pb.StepStats, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, nil, fmt.Errorf("session: run: %w", ErrClosed)
	}
	if err := sig.Check(s.g); err != nil {
		return nil, nil, fmt.Errorf("session: %w", err)
	}
	fetches := sig.Fetches
	handle, err := s.remote.ship(ctx, s.g)
	if err != nil {
		return nil, nil, err
	}
	sr := s.remote.request()
	defer s.remote.done(sr) // after the fetches are copied out: one may be a feed
	req := sr.fill(sig, vals)
	req.Fetches, req.Targets = s.names(sig) // the master only reads them
	req.SessionHandle = handle
	var start time.Time
	if traced {
		req.Options = &pb.RunOptions{Trace: true}
		start = time.Now()
	}
	resp, err := s.remote.m.RunStep(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	var end time.Time
	if traced {
		end = time.Now()
	}
	if len(resp.GetTensors()) != len(fetches) {
		return nil, nil, fmt.Errorf("session: the master returned %d tensors for %d fetches", len(resp.GetTensors()), len(fetches))
	}
	// The response is the session's: decoded from the wire, or made for
	// it by a master in this process from its workers' fetches, which
	// they hand on uncopied when their steps made them. The fetches view
	// it; one that is a feed passed back is copied (apartFromFeeds).
	out := make([]*tensor.Tensor, len(fetches))
	for i, nt := range resp.GetTensors() {
		if out[i], err = graph.TensorViewFromProto(nt.GetTensor()); err != nil {
			return nil, nil, fmt.Errorf("session: fetch %s from the master: %w", fetches[i], err)
		}
	}
	apartFromFeeds(out, vals)
	if !traced {
		return out, nil, nil
	}
	st := resp.GetStepStats()
	if st == nil {
		return nil, nil, fmt.Errorf("session: the master returned no timeline for a traced step (a master older than step traces?)")
	}
	// The master's own spans come last; its offset applies to every task,
	// whose offsets the master set relative to its own clock.
	if n := len(st.GetTasks()); n > 0 {
		off := trace.AlignOffset(start.UnixNano(), end.UnixNano(), st.GetTasks()[n-1])
		for _, ts := range st.GetTasks() {
			ts.ClockOffsetNanos += off
		}
	}
	return out, st, nil
}

// rpcCloseTimeout bounds Close's CloseSession call to the master.
const rpcCloseTimeout = 3 * time.Second

// close ends the remote session and drops the connection Open made.
func (r *rpcRemote) close() error {
	r.mu.Lock()
	handle := r.handle
	r.handle = ""
	r.mu.Unlock()
	var errs []error
	if handle != "" {
		ctx, cancel := context.WithTimeout(context.Background(), rpcCloseTimeout)
		_, err := r.m.CloseSession(ctx, &pb.CloseSessionRequest{SessionHandle: handle})
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("session: closing the remote session: %w", err))
		}
	}
	if r.closer != nil {
		errs = append(errs, r.closer.Close())
	}
	return errors.Join(errs...)
}
