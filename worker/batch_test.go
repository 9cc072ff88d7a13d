package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/partition"
	pb "github.com/distflow/distflow/proto/distflowpb"
	svc "github.com/distflow/distflow/service"

	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/worker"
)

// heldPeer is a ps whose client serves a step's batch as its test says
// (service.BatchReceiver): it tells started when asked, then runs serve,
// and tells returned when RecvTensors returns.
type heldPeer struct {
	worker.Service // nil: only RecvTensors is called
	started        chan struct{}
	returned       chan struct{}
	serve          func(ctx context.Context, keys []string, deliver func(int, *tensor.Tensor, error)) error
}

func (p *heldPeer) RecvTensors(ctx context.Context, stepID int64, keys []string, deliver func(int, *tensor.Tensor, error)) error {
	defer func() { p.returned <- struct{}{} }()
	p.started <- struct{}{}
	return p.serve(ctx, keys, deliver)
}

// batchedGraph is a worker's partition that receives a and b from ps in
// one batch and fetches their sum.
func batchedGraph(t *testing.T) *pb.GraphDef {
	t.Helper()
	g := graph.New()
	recv := func(name string) graph.Output {
		n, err := g.AddNode(partition.RecvSpec("recv_"+name, name+":0", ps+"/cpu:0", wk+"/cpu:0", tensor.Float32, tensor.MakeShape(2)))
		if err != nil {
			t.Fatal(err)
		}
		return n.Output(0)
	}
	a, b := recv("a"), recv("b")
	s := graph.NewScopeWithGraph(g)
	ops.Identity(s.SubScope("y"), ops.Add(s, a, b))
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return g.ToProto()
}

// TestBatchedStepEnds checks that a step whose tensors come in a batch
// ends as one that asks for them one by one does: at its deadline, at its
// caller's cancellation, at an abort of its rendezvous, with the error of
// a tensor, or when the batch ends without one; and that a batch whose
// peer answers after the step ended writes nowhere the step still reads
// (for the race detector: the step's state is written by the batch's
// goroutine after RunGraph returned).
func TestBatchedStepEnds(t *testing.T) {
	vals := []*tensor.Tensor{tensor.MustFromSlice([]float32{1, 2}, 2), tensor.MustFromSlice([]float32{10, 20}, 2)}
	hold := func(ctx context.Context, keys []string, deliver func(int, *tensor.Tensor, error)) error {
		<-ctx.Done()
		return ctx.Err()
	}
	release := make(chan struct{})
	tests := []struct {
		name    string
		serve   func(ctx context.Context, keys []string, deliver func(int, *tensor.Tensor, error)) error
		timeout time.Duration                                                               // of the step's context; 0: none
		end     func(t *testing.T, w *worker.Worker, step int64, cancel context.CancelFunc) // once the batch is asked
		late    bool                                                                        // the peer answers after RunGraph returned
		want    []string                                                                    // in the error; nil: the step succeeds
		wantIs  error
	}{
		{name: "delivered", serve: func(ctx context.Context, keys []string, deliver func(int, *tensor.Tensor, error)) error {
			deliver(1, vals[1], nil)
			deliver(0, vals[0], nil)
			return nil
		}},
		{name: "deadline", serve: hold, timeout: 50 * time.Millisecond,
			want: []string{wk, "waiting for tensors from " + ps}, wantIs: context.DeadlineExceeded},
		{name: "cancelled", serve: hold, end: func(t *testing.T, w *worker.Worker, step int64, cancel context.CancelFunc) { cancel() },
			want: []string{wk}, wantIs: context.Canceled},
		{name: "aborted", serve: hold, end: func(t *testing.T, w *worker.Worker, step int64, cancel context.CancelFunc) {
			if _, err := w.CleanupStep(context.Background(), &pb.CleanupStepRequest{StepId: step, AbortReason: "task /job:ps/task:0 failed"}); err != nil {
				t.Error(err)
			}
		}, want: []string{wk, "task /job:ps/task:0 failed"}},
		{name: "aborted, answered late", serve: func(ctx context.Context, keys []string, deliver func(int, *tensor.Tensor, error)) error {
			<-release // not ctx: a peer slow to notice
			for i := range keys {
				deliver(i, vals[i], nil)
			}
			return nil
		}, end: func(t *testing.T, w *worker.Worker, step int64, cancel context.CancelFunc) {
			if _, err := w.CleanupStep(context.Background(), &pb.CleanupStepRequest{StepId: step, AbortReason: "chief says stop"}); err != nil {
				t.Error(err)
			}
		}, late: true, want: []string{wk, "chief says stop"}},
		{name: "tensor failed", serve: func(ctx context.Context, keys []string, deliver func(int, *tensor.Tensor, error)) error {
			deliver(0, vals[0], nil)
			deliver(1, nil, errors.New("no such tensor at the peer"))
			return nil
		}, want: []string{wk, "no such tensor at the peer"}},
		{name: "batch ended early", serve: func(ctx context.Context, keys []string, deliver func(int, *tensor.Tensor, error)) error {
			deliver(0, vals[0], nil)
			return nil
		}, want: []string{wk, "the batch ended early"}},
		{name: "no batch", serve: func(ctx context.Context, keys []string, deliver func(int, *tensor.Tensor, error)) error {
			return svc.ErrNoBatch // each key's RecvTensor next, which fails here
		}, want: []string{wk, "no RecvTensor here"}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			peer := &heldPeer{started: make(chan struct{}, 1), returned: make(chan struct{}, 1), serve: tc.serve}
			w := worker.New(worker.Config{Task: wk, Workers: peers{ps: noRecvPeer{peer}}})
			h := register(t, w, "s", batchedGraph(t))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.timeout > 0 {
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			step := int64(200 + i)
			type result struct {
				resp *pb.RunGraphResponse
				err  error
			}
			done := make(chan result, 1)
			go func() {
				resp, err := w.RunGraph(ctx, &pb.RunGraphRequest{SessionHandle: "s", GraphHandle: h, StepId: step, Fetches: []string{"y/Identity:0"}})
				done <- result{resp, err}
			}()
			// The batch is asked, or (a deadline passed on a slow
			// machine before it could be) the step has ended already.
			var r result
			asked := false
			select {
			case <-peer.started:
				asked = true
				if tc.end != nil {
					tc.end(t, w, step, cancel)
				}
				r = <-done
			case r = <-done:
				select {
				case <-peer.started:
					asked = true
				default:
					if tc.timeout == 0 {
						t.Fatalf("the step ended before its batch was asked: %v", r.err)
					}
				}
			}
			if tc.late {
				close(release)
			}
			if asked {
				<-peer.returned // the batch's goroutine is done with the step
			}
			if tc.want == nil {
				if r.err != nil {
					t.Fatal(r.err)
				}
				got, err := graph.TensorFromProto(r.resp.GetFetches()[0].GetTensor())
				if err != nil {
					t.Fatal(err)
				}
				if want := tensor.MustFromSlice([]float32{11, 22}, 2); !tensor.Equal(got, want) {
					t.Errorf("y = %v, want %v", got, want)
				}
				return
			}
			if r.err == nil {
				t.Fatal("the step succeeded without its tensors")
			}
			for _, s := range tc.want {
				if !strings.Contains(r.err.Error(), s) {
					t.Errorf("error %q does not mention %q", r.err, s)
				}
			}
			if tc.wantIs != nil && !errors.Is(r.err, tc.wantIs) {
				t.Errorf("error %q does not wrap %v", r.err, tc.wantIs)
			}
		})
	}
}

// noRecvPeer is a peer whose RecvTensor fails at once: the keys a batch
// could not serve end there.
type noRecvPeer struct{ *heldPeer }

func (p noRecvPeer) RecvTensor(ctx context.Context, stepID int64, key string) (*tensor.Tensor, error) {
	return nil, errors.New("no RecvTensor here")
}

// latePeer is a ps whose client serves the batches of a step from a
// goroutine (service.BatchReceiver), with values of the step's own: a =
// step, b = 10*step. The batch of a step in held waits, before it
// delivers anything, until the test releases it.
type latePeer struct {
	worker.Service                 // nil: only RecvTensors is called
	stop           <-chan struct{} // closed when the test ends
	mu             sync.Mutex
	held           map[int64]*heldStep
}

// heldStep is the test's hold on one step's batch.
type heldStep struct {
	asked, release, returned chan struct{}
}

func (p *latePeer) RecvTensors(ctx context.Context, stepID int64, keys []string, deliver func(int, *tensor.Tensor, error)) error {
	p.mu.Lock()
	h := p.held[stepID]
	p.mu.Unlock()
	if h != nil {
		defer close(h.returned)
		close(h.asked)
		select {
		case <-h.release: // not ctx: a peer slow to notice
		case <-p.stop:
			return errors.New("test over")
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := len(keys) - 1; i >= 0; i-- {
			v := float32(stepID)
			if strings.HasSuffix(keys[i], ";b:0") {
				v *= 10
			}
			deliver(i, tensor.MustFromSlice([]float32{v, v}, 2), nil)
		}
	}()
	<-done
	return nil
}

// TestBatchedStepStateReuse runs steps at once on one worker, a third of
// them aborted while their batch is held and answered after RunGraph
// returned, and checks that every other step fetches its own sum: a
// step's state reused while a late batch still writes to it would give
// another step the late one's tensors, or a race under the race detector.
func TestBatchedStepStateReuse(t *testing.T) {
	const goroutines, steps = 8, 30
	stop := make(chan struct{})
	defer close(stop)
	peer := &latePeer{stop: stop, held: map[int64]*heldStep{}}
	w := worker.New(worker.Config{Task: wk, Workers: peers{ps: peer}})
	h := register(t, w, "s", batchedGraph(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wait := func(c <-chan struct{}, what string) bool {
		select {
		case <-c:
			return true
		case <-ctx.Done():
			t.Errorf("%s: %v", what, ctx.Err())
			return false
		}
	}
	run := func(step int64) (*pb.RunGraphResponse, error) {
		return w.RunGraph(ctx, &pb.RunGraphRequest{SessionHandle: "s", GraphHandle: h, StepId: step, Fetches: []string{"y/Identity:0"}})
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range steps {
				step := int64(1000 + g*steps + i)
				if i%3 == 0 {
					hs := &heldStep{asked: make(chan struct{}), release: make(chan struct{}), returned: make(chan struct{})}
					peer.mu.Lock()
					peer.held[step] = hs
					peer.mu.Unlock()
					done := make(chan error, 1)
					go func() {
						_, err := run(step)
						done <- err
					}()
					if !wait(hs.asked, fmt.Sprintf("step %d: batch not asked", step)) {
						return
					}
					if _, err := w.CleanupStep(ctx, &pb.CleanupStepRequest{StepId: step, AbortReason: "chief says stop"}); err != nil {
						t.Error(err)
						return
					}
					select {
					case err := <-done:
						if err == nil {
							t.Errorf("step %d succeeded without its tensors", step)
						}
					case <-ctx.Done():
						t.Errorf("step %d did not end at its abort: %v", step, ctx.Err())
						return
					}
					close(hs.release) // answered late, while other steps run
					if !wait(hs.returned, fmt.Sprintf("step %d: batch not answered", step)) {
						return
					}
					continue
				}
				resp, err := run(step)
				if err != nil {
					t.Errorf("step %d: %v", step, err)
					return
				}
				w.FinishStep(step)
				got, err := graph.TensorFromProto(resp.GetFetches()[0].GetTensor())
				if err != nil {
					t.Error(err)
					return
				}
				if v := float32(11 * step); !tensor.Equal(got, tensor.MustFromSlice([]float32{v, v}, 2)) {
					t.Errorf("step %d: y = %v, want [%v %v]", step, got, v, v)
				}
			}
		})
	}
	wg.Wait()
}
