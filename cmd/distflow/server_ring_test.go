package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestHandStartedPSSumsForAllReduceWorkers: a ps started by hand with
// `distflow server --job_name=ps` is a summation server for workers that
// train with `distflow train --allreduce` (ranks: the workers; summation
// servers: the ps tasks, as --local-cluster sets them up): every step sums
// through it, nothing goes round the ring, and the chief stops it at the
// end. Before, it served no Ring service ("unknown service
// distflow.Ring") and the run went round the ring after a warning.
func TestHandStartedPSSumsForAllReduceWorkers(t *testing.T) {
	addrs := rpcFreePorts(t, 3)
	ps := rpcStartServer(t, "--ps_hosts", addrs[0], "--worker_hosts", addrs[1]+","+addrs[2], "--job_name", "ps", "--task_index", "0")
	cl := fmt.Sprintf(`"cluster": {"ps": [%q], "worker": [%q, %q]}`, addrs[0], addrs[1], addrs[2])
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	type done struct {
		stdout, stderr string
		err            error
	}
	results := make([]chan done, 2)
	for i := range results {
		results[i] = make(chan done, 1)
		cmd := exec.CommandContext(ctx, binary, "train", "-v", "--model", "mlp", "--data", "embedded", "--steps", "60", "--allreduce", "--json")
		cmd.Env = append(os.Environ(), fmt.Sprintf(`TF_CONFIG={%s, "task": {"type": "worker", "index": %d}}`, cl, i))
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		go func() {
			err := cmd.Run()
			results[i] <- done{stdout.String(), stderr.String(), err}
		}()
	}
	var chief string
	for i, ch := range results {
		d := <-ch
		if d.err != nil {
			t.Fatalf("worker %d: %v\n%s", i, d.err, tail(d.stderr, 30))
		}
		for _, bad := range []string{"summation server is down", "operation through the summation servers failed", "does not serve the all-reduce service", "unknown service"} {
			if strings.Contains(d.stderr, bad) {
				t.Errorf("worker %d says %q: the run did not sum through the ps:\n%s", i, bad, tail(d.stderr, 30))
			}
		}
		if !strings.Contains(d.stderr, "summation_servers=1") {
			t.Errorf("worker %d does not say that it sums through the ps:\n%s", i, tail(d.stderr, 30))
		}
		if i == 0 {
			chief = d.stdout
		}
	}
	if gs := lastJSON(t, chief)["global_step"].(float64); gs != 60 {
		t.Errorf("global step %v, want 60", gs)
	}
	ps.waitClean(t, "training finished")
}
