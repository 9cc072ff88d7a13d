package server_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/distflow/distflow/allreduce"
	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/rpc/rpctest"
	"github.com/distflow/distflow/server"
)

// TestRing: the workers' servers serve an all-reduce ring on their own
// addresses, with their RPC options (here TLS and a token), and a stopped
// task is named as down by the others.
func TestRing(t *testing.T) {
	tc := newTestCluster(t, map[string]int{"worker": 3})
	ranks := []cluster.TaskID{{Job: "worker", Index: 0}, {Job: "worker", Index: 1}, {Job: "worker", Index: 2}}
	opts := secureOptions(t)
	servers := make([]*server.Server, 3)
	for i, id := range ranks {
		s, err := server.New(server.Config{Cluster: tc.spec, Task: id, Listener: tc.lis[id.String()], Logger: quiet, RPC: opts, Ring: ranks})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		servers[i] = s
	}
	run := func(srvs []*server.Server, round int64, timeout time.Duration) []error {
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		defer cancel()
		errs := make(chan error, len(srvs))
		data := make([][]float32, len(srvs))
		for i, s := range srvs {
			data[i] = []float32{float32(i), 1}
			go func() { errs <- s.Ring().AllReduce(ctx, "x", round, data[i]) }()
		}
		var all []error
		for range srvs {
			all = append(all, <-errs)
		}
		for i, d := range data {
			if all[i] == nil && fmt.Sprint(d) != "[3 3]" && len(srvs) == 3 {
				t.Errorf("rank %d: %v, want [3 3]", i, d)
			}
		}
		return all
	}
	for _, err := range run(servers, 0, 10*time.Second) {
		if err != nil {
			t.Fatal(err)
		}
	}
	servers[2].Stop()
	for i, err := range run(servers[:2], 1, 2*time.Second) {
		var pe *allreduce.PeerDownError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), "/job:worker/task:2") {
			t.Errorf("rank %d with rank 2 stopped: %v, want a PeerDownError naming /job:worker/task:2", i, err)
		}
	}
}

// secureOptions are one task's options with TLS (a certificate and the
// roots that verify it) and a token, for its server and its clients.
func secureOptions(t *testing.T) rpc.Options {
	serverTLS, clientTLS := rpctest.SelfSignedTLS(t)
	return rpc.Options{
		TLS: &tls.Config{Certificates: serverTLS.Certificates, RootCAs: clientTLS.RootCAs},
		Authenticate: func(ctx context.Context) error {
			if md, _ := metadata.FromIncomingContext(ctx); slices.Equal(md.Get("authorization"), []string{"Bearer s3cret"}) {
				return nil
			}
			return errors.New("bad or missing token")
		},
		PerRPCCredentials: tokenCreds("s3cret"),
	}
}

func TestRingConfig(t *testing.T) {
	tc := newTestCluster(t, map[string]int{"worker": 2, "ps": 1})
	ranks := []cluster.TaskID{{Job: "worker", Index: 0}, {Job: "worker", Index: 1}}
	ps := cluster.TaskID{Job: "ps"}
	if _, err := server.New(server.Config{Cluster: tc.spec, Task: ps, Logger: quiet, Ring: ranks}); err == nil || !strings.Contains(err.Error(), "not one of the ring's ranks") {
		t.Errorf("a ps in a ring of workers: %v", err)
	}
	if _, err := server.New(server.Config{Cluster: tc.spec, Task: ranks[0], Logger: quiet, RPC: rpc.Options{MaxTensorBytes: -1}}); err == nil || !strings.Contains(err.Error(), "MaxTensorBytes") {
		t.Errorf("invalid RPC options: %v", err)
	}
	s, err := server.New(server.Config{Cluster: tc.spec, Task: ps, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if s.Ring() != nil {
		t.Error("a server without Config.Ring has a ring")
	}
}

// TestSummationRing: a ps task serves the ring of the training tasks
// (the chief, then the workers) as a summation server beside the other ps
// tasks, as `distflow train --allreduce` sets it up; a training task, or
// a cluster of ps tasks alone, gets none.
func TestSummationRing(t *testing.T) {
	spec, err := cluster.NewSpec(map[string][]string{
		"chief": {"127.0.0.1:1"}, "worker": {"127.0.0.1:2", "127.0.0.1:3"}, "ps": {"127.0.0.1:4", "127.0.0.1:5"},
	})
	if err != nil {
		t.Fatal(err)
	}
	onlyPS, err := cluster.NewSpec(map[string][]string{"ps": {"127.0.0.1:4"}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		spec          *cluster.Spec
		task          cluster.TaskID
		ranks, server string
	}{
		{spec, cluster.TaskID{Job: "ps", Index: 1}, "[/job:chief/task:0 /job:worker/task:0 /job:worker/task:1]", "[/job:ps/task:0 /job:ps/task:1]"},
		{spec, cluster.TaskID{Job: "worker", Index: 0}, "[]", "[]"},
		{onlyPS, cluster.TaskID{Job: "ps"}, "[]", "[]"},
	}
	for _, tt := range tests {
		ranks, servers := server.SummationRing(tt.spec, tt.task)
		if fmt.Sprint(ranks) != tt.ranks || fmt.Sprint(servers) != tt.server {
			t.Errorf("SummationRing(%v, %v) = %v, %v; want %s, %s", tt.spec, tt.task, ranks, servers, tt.ranks, tt.server)
		}
	}
	ranks, servers := server.SummationRing(spec, cluster.TaskID{Job: "ps"})
	if _, err := server.New(server.Config{Cluster: spec, Task: cluster.TaskID{Job: "ps"}, Logger: quiet, Ring: ranks, RingServers: servers}); err != nil {
		t.Errorf("a ps serving its summation ring: %v", err)
	}
}
