package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestProgressBar feeds the estimator's progress lines, as a local cluster
// prefixes them, to the bar: it shows the steps, epoch, loss and rate, and
// passes the other lines through whole.
func TestProgressBar(t *testing.T) {
	var out bytes.Buffer
	b := newProgressBar(&out)
	for _, l := range []string{
		"[worker 0] /job:worker/task:0: local_step 100  global_step 187/3000  epoch 0.31  loss 0.6374  avg_step 10.27ms  9737 examples/s\n",
		"[worker 0] a warning\n",
		"[worker 0] /job:worker/task:0: local_step 200  global_step 1500/3000  epoch 2.50  loss 0.4012  avg_step 6.64ms  15061 examples/s  accuracy 0.8000\n",
	} {
		// In pieces, as pipes deliver them.
		half := len(l) / 2
		b.Write([]byte(l[:half]))
		b.Write([]byte(l[half:]))
	}
	s := out.String()
	for _, want := range []string{"1500/3000", "epoch 2.50", "loss 0.4012", "15061 ex/s", "[worker 0] a warning\n", "50%"} {
		if !strings.Contains(s, want) {
			t.Errorf("the bar's output lacks %q:\n%q", want, s)
		}
	}
	// Another worker's progress (-v) is printed, not followed.
	other := "[worker 1] /job:worker/task:1: local_step 200  global_step 1600/3000  loss 0.4000  avg_step 6ms  15000 examples/s"
	b.Write([]byte(other + "\n"))
	if !strings.Contains(out.String(), other+"\n") {
		t.Errorf("another worker's line was not printed:\n%q", out.String())
	}
	b.Write([]byte("[worker 0] /job:worker/task:0: local_step 300  global_step 3000/3000  loss 0.3000  avg_step 6ms  15000 examples/s\n"))
	if !strings.Contains(out.String(), "3000/3000") || b.bar != nil {
		t.Errorf("the last step does not finish the bar:\n%q", out.String())
	}
}

// TestProgressPlainWhenNotATerminal: a pipe or a file gets the plain lines.
func TestProgressPlainWhenNotATerminal(t *testing.T) {
	var buf bytes.Buffer
	if w := progressOutput(&buf); w != &buf {
		t.Errorf("a buffer got %T", w)
	}
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if w := progressOutput(f); w != f {
		t.Errorf("a file got %T", w)
	}
}
