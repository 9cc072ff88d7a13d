package main

import (
	"bufio"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/savedmodel"
	"github.com/distflow/distflow/tensor"
)

// startServe starts `distflow serve` with args (which must include --port
// 0) and returns the model's URL from its first line; the server gets
// SIGTERM at the end of the test and must exit 0.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"serve"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		io.Copy(io.Discard, stdout)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("distflow serve after SIGTERM: %v; stderr:\n%s", err, stderr.String())
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Error("distflow serve did not exit after SIGTERM")
		}
	})
	select {
	case line := <-lines:
		m := regexp.MustCompile(`(http://127\.0\.0\.1:\d+/v1/models/\S+)$`).FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("first line %q does not give the URL; stderr:\n%s", line, stderr.String())
		}
		return m[1]
	case <-time.After(30 * time.Second):
		t.Fatalf("no URL line from distflow serve; stderr:\n%s", stderr.String())
		return ""
	}
}

// TestTrainedModelServesItsOwnPredictions trains each classifier with
// --export (the MLP on a local cluster, whose chief exports), serves the
// export, and checks that predictions over REST, in the row and the
// columnar formats, have the bits of the export's in-process predictions.
func TestTrainedModelServesItsOwnPredictions(t *testing.T) {
	_, test, err := data.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	const rows = 5
	batch := tensor.MustFromSlice(test.Images.Float32s()[:rows*784], rows, 784)
	var instances strings.Builder
	instances.WriteString("[")
	for i := range rows {
		if i > 0 {
			instances.WriteString(",")
		}
		instances.WriteString("[")
		for j, v := range batch.Float32s()[i*784 : (i+1)*784] {
			if j > 0 {
				instances.WriteString(",")
			}
			instances.WriteString(strconv.FormatFloat(float64(v), 'g', -1, 32))
		}
		instances.WriteString("]")
	}
	instances.WriteString("]")

	for _, tc := range []struct {
		model string
		args  []string
	}{
		{"mlp", []string{"--epochs", "2", "--local-cluster", "ps=1,worker=2"}},
		{"cnn", []string{"--steps", "20"}},
	} {
		t.Run(tc.model, func(t *testing.T) {
			base := t.TempDir()
			stdout, stderr, err := run(t, append([]string{"train", "--model", tc.model, "--data", "embedded", "--export", base, "--json"}, tc.args...)...)
			if err != nil {
				t.Fatalf("%v\n%s", err, tail(stderr, 20))
			}
			dir, _ := lastJSON(t, stdout)["export"].(string)
			if dir == "" {
				t.Fatalf("no export in the result:\n%s", stdout)
			}
			p, err := savedmodel.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			want, err := p.Predict(t.Context(), map[string]*tensor.Tensor{"images": batch})
			if err != nil {
				t.Fatal(err)
			}
			url := startServe(t, "--model-dir", base, "--port", "0")
			for _, body := range []string{`{"instances": ` + instances.String() + `}`, `{"inputs": {"images": ` + instances.String() + `}}`} {
				resp, err := http.Post(url+":predict", "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				var got struct {
					Predictions []struct {
						Probabilities []json.Number `json:"probabilities"`
						Classes       int32         `json:"classes"`
					} `json:"predictions"`
					Outputs struct {
						Probabilities [][]json.Number `json:"probabilities"`
						Classes       []int32         `json:"classes"`
					} `json:"outputs"`
				}
				err = json.NewDecoder(resp.Body).Decode(&got)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("predict: status %d, %v", resp.StatusCode, err)
				}
				probs, classes := got.Outputs.Probabilities, got.Outputs.Classes
				if got.Predictions != nil {
					probs, classes = nil, nil
					for _, pr := range got.Predictions {
						probs, classes = append(probs, pr.Probabilities), append(classes, pr.Classes)
					}
				}
				if len(probs) != rows || len(classes) != rows {
					t.Fatalf("%d rows of probabilities and %d classes; want %d", len(probs), len(classes), rows)
				}
				for i := range rows {
					if classes[i] != want["classes"].Int32s()[i] {
						t.Errorf("row %d: class %d over REST, %d in process", i, classes[i], want["classes"].Int32s()[i])
					}
					for j, n := range probs[i] {
						f, err := strconv.ParseFloat(string(n), 32)
						if w := want["probabilities"].Float32s()[i*10+j]; err != nil || math.Float32bits(float32(f)) != math.Float32bits(w) {
							t.Fatalf("row %d, probability %d: %s over REST; in process the bits of %v", i, j, n, w)
						}
					}
				}
			}
		})
	}
}
