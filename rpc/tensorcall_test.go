package rpc_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rendezvous"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/service"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/worker"
	"github.com/distflow/distflow/worker/workertest"
)

// TestTensorChannelCalls: RunGraph and CleanupStep go over the tensor
// channel (version 1.1), authenticated under their gRPC method names,
// with the worker's answers and errors, plaintext and TLS; without the
// channel they go over gRPC.
func TestTensorChannelCalls(t *testing.T) {
	tlsSrv, tlsCli := testTLS(t)
	for _, tc := range []struct {
		name        string
		srv, cli    rpc.Options
		wantChannel bool
	}{
		{"plaintext", rpc.Options{}, rpc.Options{}, true},
		{"tls", tlsSrv, tlsCli, true},
		{"grpc only", rpc.Options{}, rpc.Options{NoTensorChannel: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The channel's requests carry only the credentials' metadata;
			// gRPC's carry its content-type.
			var mu sync.Mutex
			calls := map[string][2]int{} // method -> [channel, gRPC]
			tc.srv.Authenticate = func(ctx context.Context) error {
				m, _ := grpc.Method(ctx)
				md, _ := metadata.FromIncomingContext(ctx)
				mu.Lock()
				defer mu.Unlock()
				n := calls[m]
				if len(md.Get("content-type")) == 0 {
					n[0]++
				} else {
					n[1]++
				}
				calls[m] = n
				return nil
			}
			s := &suite{Svc: serveWorker(t, worker.New(worker.Config{Task: suiteTask}), tc.srv, tc.cli)}
			h := s.Register(t, "sess", func(sc *graph.Scope) {
				x := ops.Placeholder(sc, "x", tensor.Float32, tensor.MakeShape(2))
				sc.AddNode("Identity", "y", []graph.Output{ops.Add(sc, x, x)}, nil)
			})
			ctx := ctxT(t)
			req := &pb.RunGraphRequest{SessionHandle: "sess", GraphHandle: h, StepId: 7,
				Feeds:   []*pb.NamedTensor{{Name: "x:0", Tensor: graph.TensorToProto(tensor.MustFromSlice([]float32{1, 2}, 2))}},
				Fetches: []string{"y:0"}}
			resp, err := s.Svc.RunGraph(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := graph.TensorFromProto(resp.GetFetches()[0].GetTensor())
			if err != nil || !tensor.Equal(got, tensor.MustFromSlice([]float32{2, 4}, 2)) || resp.GetFetches()[0].GetName() != "y:0" {
				t.Errorf("fetched %v (%v), want y:0 = [2 4]", got, err)
			}
			// Over the channel, the worker finished the step itself (nothing
			// of it pending): its cleanup makes no call.
			if _, err := s.Svc.CleanupStep(ctx, &pb.CleanupStepRequest{StepId: 7}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Svc.RecvTensor(ctx, 7, "k"); !errors.Is(err, rendezvous.ErrStepDone) {
				t.Errorf("RecvTensor of a cleaned-up step: %v, want ErrStepDone", err)
			}
			// A step with a tensor sent and not received is not finished:
			// its cleanup is a call, as is one with an abort reason.
			sh, key := s.SendGraph(t, func(sc *graph.Scope) graph.Output { return ops.Const(sc, tensor.MustFromSlice([]int32{1}, 1)) })
			s.RunSend(t, sh, 8)
			if _, err := s.Svc.CleanupStep(ctx, &pb.CleanupStepRequest{StepId: 8}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Svc.RecvTensor(ctx, 8, key); !errors.Is(err, rendezvous.ErrStepDone) {
				t.Errorf("RecvTensor of a cleaned-up step: %v, want ErrStepDone", err)
			}
			if _, err := s.Svc.CleanupStep(ctx, &pb.CleanupStepRequest{StepId: 9, AbortReason: "test"}); err != nil {
				t.Fatal(err)
			}
			// The worker's error comes back with its sentinel.
			req.GraphHandle = "nosuchgraph"
			if _, err := s.Svc.RunGraph(ctx, req); !errors.Is(err, worker.ErrNoGraph) {
				t.Errorf("RunGraph of an unknown graph: %v, want ErrNoGraph", err)
			}
			mu.Lock()
			defer mu.Unlock()
			want := map[string]int{"/distflow.WorkerService/RunGraph": 3, "/distflow.WorkerService/CleanupStep": 2}
			if !tc.wantChannel {
				want["/distflow.WorkerService/CleanupStep"] = 3
			}
			for m, w := range want {
				n := calls[m]
				if tc.wantChannel && n != [2]int{w, 0} || !tc.wantChannel && n != [2]int{0, w} {
					t.Errorf("%s: %d calls over the channel, %d over gRPC; want %d over the channel: %v", m, n[0], n[1], w, tc.wantChannel)
				}
			}
		})
	}
}

// TestTensorChannelOlderPeer: a peer that speaks version 1.0 of the
// channel answers a 1.1 hello with its own and hangs up, as older servers
// do; the client then speaks 1.0 to it (no method byte), and its calls go
// over gRPC.
func TestTensorChannelOlderPeer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	v10 := []byte("distflow-tensors/1.0\r\n\r\n")
	got := make(chan int64, 1)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				hello := make([]byte, len(v10))
				if _, err := io.ReadFull(c, hello); err != nil {
					return
				}
				c.Write(v10)
				if string(hello) != string(v10) {
					return // an older server answers its version and hangs up
				}
				var h [12]byte // length, then the step id of a 1.0 request
				if _, err := io.ReadFull(c, h[:]); err != nil {
					return
				}
				if _, err := io.CopyN(io.Discard, c, int64(binary.LittleEndian.Uint32(h[:]))-8); err != nil {
					return
				}
				got <- int64(binary.LittleEndian.Uint64(h[4:]))
				resp := []byte{0, byte(tensor.Int32), 1}
				resp = binary.LittleEndian.AppendUint64(resp, 1)
				resp = binary.LittleEndian.AppendUint64(resp, 4)
				c.Write(binary.LittleEndian.AppendUint32(resp, 42))
			}()
		}
	}()
	c, closer, err := rpc.DialWorker(lis.Addr().String(), rpc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	v, err := c.RecvTensor(ctxT(t), 5, "k")
	if err != nil {
		t.Fatal(err)
	}
	if !tensor.Equal(v, tensor.MustFromSlice([]int32{42}, 1)) {
		t.Errorf("received %v, want [42]", v)
	}
	if step := <-got; step != 5 {
		t.Errorf("the peer read step %d, want 5 in a version 1.0 request", step)
	}
	if idle, offline := rpc.TensorChannelState(c); idle != 1 || offline {
		t.Errorf("tensor channel: %d idle connections, offline %v; want 1, not offline", idle, offline)
	}
}

// TestTensorChannelBatch: a batch of a step's tensors (RecvTensors) is
// answered key by key, each with its tensor, the tensors sent together
// at once, plaintext and TLS; a key never sent ends with the request's
// context, the others delivered.
func TestTensorChannelBatch(t *testing.T) {
	tlsSrv, tlsCli := testTLS(t)
	for _, tc := range []struct {
		name     string
		srv, cli rpc.Options
	}{{"plaintext", rpc.Options{}, rpc.Options{}}, {"tls", tlsSrv, tlsCli}} {
		t.Run(tc.name, func(t *testing.T) {
			s := &suite{Svc: serveWorker(t, worker.New(worker.Config{Task: suiteTask}), tc.srv, tc.cli)}
			want := []*tensor.Tensor{
				tensor.MustFromSlice([]float32{1, 2, 3}, 3),
				tensor.New(tensor.Float64, 1<<16), // over a TLS record
				tensor.MustFromSlice([]int32{7}, 1),
			}
			var keys []string
			h := s.Register(t, "sess", func(sc *graph.Scope) {
				for i, v := range want {
					name := fmt.Sprintf("v%d:0", i)
					sc.AddNode("Send", fmt.Sprintf("send%d", i), []graph.Output{ops.Const(sc, v)},
						map[string]any{"tensor_name": name, "send_device": workertest.Device, "recv_device": workertest.PeerDevice})
					keys = append(keys, rendezvous.Key(workertest.Device, workertest.PeerDevice, name))
				}
			})
			if _, err := s.Svc.RunGraph(ctxT(t), &pb.RunGraphRequest{SessionHandle: "sess", GraphHandle: h, StepId: 3, Targets: []string{"send0", "send1", "send2"}}); err != nil {
				t.Fatal(err)
			}
			br, ok := s.Svc.(service.BatchReceiver)
			if !ok {
				t.Fatal("the rpc client is not a service.BatchReceiver")
			}
			got := make([]*tensor.Tensor, len(keys))
			if err := br.RecvTensors(ctxT(t), 3, keys, func(i int, v *tensor.Tensor, err error) {
				if err != nil || got[i] != nil {
					t.Errorf("key %d: %v (delivered before: %v)", i, err, got[i] != nil)
				}
				got[i] = v
			}); err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if got[i] == nil || !tensor.Equal(got[i], want[i]) {
					t.Errorf("key %d: got %v, want %v", i, got[i], want[i])
				}
			}
			// A key never sent: the others arrive, it fails with the context.
			one, _ := s.SendGraph(t, func(sc *graph.Scope) graph.Output { return ops.Const(sc, tensor.MustFromSlice([]int32{1}, 1)) })
			s.RunSend(t, one, 4)
			ctx, cancel := context.WithTimeout(ctxT(t), 300*time.Millisecond)
			defer cancel()
			errs := map[int]error{}
			err := br.RecvTensors(ctx, 4, []string{rendezvous.Key(workertest.Device, workertest.PeerDevice, "v:0"), "never;sent;x:0"}, func(i int, v *tensor.Tensor, err error) {
				errs[i] = err
			})
			if errs[0] != nil || !errors.Is(errs[1], context.DeadlineExceeded) && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("batch with a key never sent: %v, %v, returned %v; want the first delivered and the second past its deadline", errs[0], errs[1], err)
			}
		})
	}
}

// TestTensorChannelUnansweredPeer: a peer whose listener accepts
// connections that nothing serves (a parent holding the listener of a task
// that is down, or a stopped task) fails RunGraph and RecvTensor with
// ErrUnavailable naming it once the hello has had no answer, a lost task
// to recover from, rather than waiting out the call's deadline; the peer
// is not taken to lack the channel.
func TestTensorChannelUnansweredPeer(t *testing.T) {
	defer rpc.SetHelloTimeout(300 * time.Millisecond)()
	lis, err := net.Listen("tcp", "127.0.0.1:0") // never accepted: the kernel queues the connections
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	addr := lis.Addr().String()
	for _, opts := range []struct {
		name string
		cli  func() rpc.Options
	}{
		{"plaintext", func() rpc.Options { return rpc.Options{} }},
		{"TLS", func() rpc.Options { _, cli := testTLS(t); return cli }},
	} {
		t.Run(opts.name, func(t *testing.T) {
			c, closer, err := rpc.DialWorker(addr, opts.cli())
			if err != nil {
				t.Fatal(err)
			}
			defer closer.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			calls := map[string]func() error{
				"RunGraph": func() error {
					_, err := c.RunGraph(ctx, &pb.RunGraphRequest{GraphHandle: "g", StepId: 1})
					return err
				},
				"RecvTensor": func() error { _, err := c.RecvTensor(ctx, 1, "k"); return err },
			}
			for name, call := range calls {
				start := time.Now()
				err := call()
				if !errors.Is(err, rpc.ErrUnavailable) || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "no answer") {
					t.Errorf("%s: err = %v, want one wrapping ErrUnavailable naming %s and the unanswered hello", name, err, addr)
				}
				if d := time.Since(start); d > 10*time.Second {
					t.Errorf("%s failed after %v, want after the hello's 300ms", name, d)
				}
			}
			if _, offline := rpc.TensorChannelState(c); offline {
				t.Error("the unanswered peer is taken not to offer the channel; want it asked again")
			}
		})
	}
	// A call whose deadline is nearer than the hello's own bound gives the
	// hello half of what it has left, and fails as Unavailable before its
	// deadline, not with it.
	t.Run("the call's deadline first", func(t *testing.T) {
		defer rpc.SetHelloTimeout(time.Minute)()
		c, closer, err := rpc.DialWorker(addr, rpc.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer closer.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err = c.RunGraph(ctx, &pb.RunGraphRequest{GraphHandle: "g", StepId: 1})
		if !errors.Is(err, rpc.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			t.Errorf("err = %v (context: %v), want ErrUnavailable before the call's deadline", err, ctx.Err())
		}
	})
}

// blockingWorker answers RunGraph for step 1 at once and holds any other
// step until its context ends (saying when it started and ended) or the
// test releases it.
type blockingWorker struct {
	*worker.Worker
	started, ended, release chan struct{}
}

func (b *blockingWorker) RunGraph(ctx context.Context, r *pb.RunGraphRequest) (*pb.RunGraphResponse, error) {
	if r.GetStepId() == 1 {
		return &pb.RunGraphResponse{}, nil
	}
	close(b.started)
	select {
	case <-ctx.Done():
		close(b.ended)
		return nil, ctx.Err()
	case <-b.release: // the test is over: let the server stop
		return nil, errors.New("released by the test")
	}
}

// RunGraphInto is RunGraph's: the embedded worker's would bypass it.
func (b *blockingWorker) RunGraphInto(ctx context.Context, r *pb.RunGraphRequest, resp *pb.RunGraphResponse) error {
	out, err := b.RunGraph(ctx, r)
	if err == nil {
		resp.Reset()
		resp.Fetches = out.Fetches
	}
	return err
}

// TestTensorChannelServerStopsWhenClientGoes: a call that blocks on the
// server (a RunGraph waiting for a tensor) ends there when its client
// cancels it, on a connection that has served a call before (the server's
// two goroutines take turns reading, see serveTensors) and long before
// any deadline.
func TestTensorChannelServerStopsWhenClientGoes(t *testing.T) {
	bw := &blockingWorker{Worker: worker.New(worker.Config{Task: suiteTask}),
		started: make(chan struct{}), ended: make(chan struct{}), release: make(chan struct{})}
	c := serveWorker(t, bw, rpc.Options{}, rpc.Options{})
	t.Cleanup(func() { close(bw.release) }) // before the server's Stop, which waits for the call
	if _, err := c.RunGraph(ctxT(t), &pb.RunGraphRequest{GraphHandle: "g", StepId: 1}); err != nil {
		t.Fatal(err)
	}
	if idle, _ := rpc.TensorChannelState(c); idle != 1 {
		t.Fatalf("%d idle connections after a call over the channel, want 1", idle)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.RunGraph(ctx, &pb.RunGraphRequest{GraphHandle: "g", StepId: 2})
		done <- err
	}()
	select {
	case <-bw.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the second call did not reach the worker")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled call: err = %v, want context.Canceled", err)
	}
	select {
	case <-bw.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the server's RunGraph still waits 10 s after its client cancelled")
	}
}
