package rpc_test

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/worker"
)

// secureCreds is a token that asks for TLS.
type secureCreds struct{ tokenCreds }

func (secureCreds) RequireTransportSecurity() bool { return true }

func TestOptionsValidate(t *testing.T) {
	tlsOpts, _ := testTLS(t)
	tests := []struct {
		name string
		opts rpc.Options
		want string // "" for valid
	}{
		{"zero", rpc.Options{}, ""},
		{"limits", rpc.Options{MaxMessageBytes: rpc.MinMessageBytes, MaxTensorBytes: 1}, ""},
		{"small messages", rpc.Options{MaxMessageBytes: 1 << 20}, "MaxMessageBytes"},
		{"negative messages", rpc.Options{MaxMessageBytes: -1}, "MaxMessageBytes"},
		{"negative tensors", rpc.Options{MaxTensorBytes: -1}, "MaxTensorBytes"},
		{"negative timeout", rpc.Options{KeepaliveTimeout: -1}, "KeepaliveTimeout"},
		{"keepalive off", rpc.Options{Keepalive: -1}, ""},
		{"token without TLS", rpc.Options{PerRPCCredentials: secureCreds{"x"}}, "TLS"},
		{"token with TLS", rpc.Options{TLS: tlsOpts.TLS, PerRPCCredentials: secureCreds{"x"}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate() = %v, want %q", err, tc.want)
			}
			if tc.want == "" {
				return
			}
			if _, _, err := rpc.DialWorker("127.0.0.1:1", tc.opts); err == nil {
				t.Error("DialWorker accepted invalid options")
			}
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			if err := rpc.NewServer(tc.opts).Serve(lis); err == nil {
				t.Error("Serve accepted invalid options")
			}
		})
	}
}

// TestMaxTensorBytes: a tensor above the receiver's limit fails with
// ErrTooLarge before it is allocated, over the tensor channel and over
// gRPC; one at the limit passes.
func TestMaxTensorBytes(t *testing.T) {
	for _, tc := range []struct {
		name string
		cli  rpc.Options
	}{
		{"channel", rpc.Options{MaxTensorBytes: 4000}},
		{"grpc", rpc.Options{MaxTensorBytes: 4000, NoTensorChannel: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &suite{Svc: serveWorker(t, worker.New(worker.Config{Task: suiteTask}), rpc.Options{}, tc.cli)}
			for i, n := range []int{1000, 1001} {
				h, key := s.SendGraph(t, func(sc *graph.Scope) graph.Output { return ops.Const(sc, tensor.New(tensor.Float32, n)) })
				step := int64(i + 1)
				s.RunSend(t, h, step)
				_, err := s.Svc.RecvTensor(ctxT(t), step, key)
				if n*4 <= 4000 && err != nil {
					t.Errorf("%d bytes, limit 4000: %v", n*4, err)
				}
				if n*4 > 4000 && !errors.Is(err, rpc.ErrTooLarge) {
					t.Errorf("%d bytes, limit 4000: %v, want ErrTooLarge", n*4, err)
				}
			}
		})
	}
}
