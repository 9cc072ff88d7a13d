package main

import (
	"strings"
	"testing"
)

// TestAllReduceThroughThePSMatchesTheRing: --allreduce with ps tasks sums
// the gradients on them (each ps a slice) and trains exactly as the ring
// does: with two workers every sum is a+b whichever way it is made, so
// the losses agree to the last digit. The ps tasks end with the training.
func TestAllReduceThroughThePSMatchesTheRing(t *testing.T) {
	common := []string{"train", "-v", "--model", "mlp", "--data", "embedded", "--steps", "120", "--allreduce", "--json"}
	ring, ringLogs, err := run(t, append(common, "--local-cluster", "worker=2")...)
	if err != nil {
		t.Fatalf("%v\n%s", err, tail(ringLogs, 20))
	}
	star, starLogs, err := run(t, append(common, "--local-cluster", "ps=2,worker=2")...)
	if err != nil {
		t.Fatalf("%v\n%s", err, tail(starLogs, 20))
	}
	if !strings.Contains(starLogs, "summation_servers=2") {
		t.Errorf("the workers do not say that they sum through the 2 ps tasks:\n%s", tail(starLogs, 20))
	}
	if strings.Contains(starLogs, "summation server is down") || strings.Contains(starLogs, "operation failed") {
		t.Errorf("the run went round the ring:\n%s", starLogs)
	}
	if a, b := lastJSON(t, ring)["loss"], lastJSON(t, star)["loss"]; a != b {
		t.Errorf("final loss %v through the ps tasks, %v round the ring: want them equal", b, a)
	}
}

// TestAllReduceThroughThePSSurvivesAPSKill: a summation ps that is killed
// (SIGKILL) fails the operation through the servers on both workers; the
// leader's next view goes round the ring while the ps does not answer (or
// through the servers again, if the launcher has restarted it by then: it
// holds nothing), and training ends as it would have.
func TestAllReduceThroughThePSSurvivesAPSKill(t *testing.T) {
	stdout, logs := runKillingPS(t, 1, "step 40/", "train", "-v", "--model", "mlp", "--data", "embedded", "--epochs", "20", "--log-every", "20",
		"--local-cluster", "ps=2,worker=2", "--allreduce", "--step-timeout", "10s", "--json")
	if !strings.Contains(logs, "the operation through the summation servers failed") || !strings.Contains(logs, `msg="the ring re-forms"`) {
		t.Errorf("no worker saw the operation through the servers fail, or the ring did not re-form:\n%s", tail(logs, 30))
	}
	res := lastJSON(t, stdout)
	if gs := res["global_step"].(float64); gs != 800 { // 20 epochs of 8,000 examples, 2 x 100 a step
		t.Errorf("global step %v, want 800", gs)
	}
	if acc := res["test_accuracy"].(float64); acc < 0.75 {
		t.Errorf("test accuracy %.4f, want about 0.8", acc)
	}
}
