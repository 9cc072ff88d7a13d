//go:build linux

package main

import (
	"regexp"
	"strconv"
	"testing"
)

// TestHashEmbeddingPSKilledIsRestored: SIGKILL a ps of an asynchronous
// hash-embedding run with checkpoints: the launcher restarts it, the chief
// restores the latest checkpoint, the restarted ps's table shards get
// their rows back (the restore logs every shard's rows), training goes on
// and the run reports its AUC.
func TestHashEmbeddingPSKilledIsRestored(t *testing.T) {
	dir := t.TempDir()
	cmd, ps, lines, stdout := recoveryRun(t, "train", "-v", "--model", "widedeep", "--hash-embedding", "--steps", "600", "--batch", "256",
		"--local-cluster", "ps=2,worker=2", "--checkpoint-dir", dir, "--save-checkpoint-steps", "100", "--step-timeout", "10s",
		"--step-delay", "5ms", "--log-every", "100", "--json")
	waitFor(t, lines, "checkpoint: saved")
	killTask(t, ps, "ps", 1)
	waitFor(t, lines, "local cluster: ps 1 died (signal: killed); restarting it on its address (1 of 3)")
	restored := waitFor(t, lines, "checkpoint: restored")
	m := regexp.MustCompile(`hash_rows="deep/hash_emb: (\d+)\+(\d+), wide/hash_emb: (\d+)\+(\d+)"`).FindStringSubmatch(restored)
	if m == nil {
		t.Fatalf("the restore names no rows of both tables' two shards: %s", restored)
	}
	for _, n := range m[1:] {
		// 2,600 ids, about half per shard; a shard sees all of its
		// frequent ones within the first 100 steps.
		if rows, _ := strconv.Atoi(n); rows < 200 {
			t.Errorf("a table shard restored %d rows: %s", rows, restored)
		}
	}
	waitFor(t, lines, "recovered from a lost task")
	if err := waitExit(t, cmd); err != nil {
		t.Fatalf("the run failed after its ps was killed: %v", err)
	}
	res := lastJSON(t, stdout())
	if auc, _ := res["auc"].(float64); auc < 0.75 {
		t.Errorf("auc %v after the restore: %v", auc, res)
	}
	noTasksLeft(t, ps)
}
