package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/distflow/distflow/savedmodel"
	"github.com/distflow/distflow/savedmodel/savedmodeltest"
	"github.com/distflow/distflow/serving"
	"github.com/distflow/distflow/tensor"
)

func TestServePredictsAndStopsOnSIGTERM(t *testing.T) {
	b, err := savedmodeltest.MLP(2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	base := t.TempDir()
	_, dir, err := savedmodel.WriteVersion(base, b.Model)
	if err != nil {
		t.Fatal(err)
	}
	p, err := savedmodel.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	url := startServe(t, "--model_dir", base, "--port", "0", "--model-name", "mlp", "--batch-timeout", "1ms")

	imgs := savedmodeltest.Images(3, 9)
	want, err := p.Predict(context.Background(), map[string]*tensor.Tensor{"images": imgs})
	if err != nil {
		t.Fatal(err)
	}
	rows := make([]string, 3)
	for i := range rows {
		vals := make([]string, 784)
		for j, v := range imgs.Float32s()[i*784 : (i+1)*784] {
			vals[j] = strconv.FormatFloat(float64(v), 'g', -1, 32)
		}
		rows[i] = "[" + strings.Join(vals, ",") + "]"
	}
	resp, err := http.Post(url+":predict", "application/json", strings.NewReader(`{"instances":[`+strings.Join(rows, ",")+`]}`))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Predictions []struct {
			Probabilities []json.Number `json:"probabilities"`
			Classes       int32         `json:"classes"`
		} `json:"predictions"`
	}
	err = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || len(got.Predictions) != 3 {
		t.Fatalf("predict: status %d, %v, %+v", resp.StatusCode, err, got)
	}
	// The request is counted where Prometheus scrapes TF Serving.
	root := url[:strings.Index(url, "/v1/")]
	mresp, err := http.Get(root + serving.DefaultMetricsPath)
	if err != nil {
		t.Fatal(err)
	}
	text, err := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if line := `:tensorflow:serving:request_count{model_name="mlp",status="OK"} 1`; err != nil || !strings.Contains(string(text), line+"\n") {
		t.Errorf("metrics (%v) lack %q:\n%.2000s", err, line, text)
	}
	for i, pr := range got.Predictions {
		if pr.Classes != want["classes"].Int32s()[i] {
			t.Errorf("row %d: class %d, want %d", i, pr.Classes, want["classes"].Int32s()[i])
		}
		for j, n := range pr.Probabilities {
			f, err := strconv.ParseFloat(string(n), 32)
			if w := want["probabilities"].Float32s()[i*10+j]; err != nil || math.Float32bits(float32(f)) != math.Float32bits(w) {
				t.Fatalf("row %d, probability %d: %s, want the bits of %v", i, j, n, w)
			}
		}
	}
}

func TestServeRejectsBadFlags(t *testing.T) {
	empty := t.TempDir()
	file := filepath.Join(empty, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--port", "0"}, "--model-dir is required"},
		{[]string{"serve", "--model-dir", empty, "--port", "70000"}, "--port 70000"},
		{[]string{"serve", "--model-dir", empty, "--port", "0", "--max-batch-size", "0"}, "--max-batch-size"},
		{[]string{"serve", "--model-dir", empty, "--port", "0", "--batch-timeout", "-1ms"}, "--batch-timeout"},
		{[]string{"serve", "--model-dir", empty, "--port", "0", "--poll-interval", "0s"}, "--poll-interval"},
		{[]string{"serve", "--model-dir", empty, "--port", "0", "--max_body_bytes", "0"}, "--max-body-bytes"},
		{[]string{"serve", "--model-dir", empty, "--port", "0", "--metrics-path", "metrics"}, "--metrics-path"},
		{[]string{"serve", "--model-dir", empty, "--port", "0", "--read-timeout", "-1s"}, "--read-timeout"},
		{[]string{"serve", "--model-dir", empty, "--port", "0", "--idle-timeout", "-1s"}, "--idle-timeout"},
		{[]string{"serve", "--model-dir", empty, "--port", "0", "--max-header-bytes", "0"}, "--max-header-bytes"},
		{[]string{"serve", "--model-dir", empty, "--port", "0", "--min-transfer-rate", "-5"}, "--min-transfer-rate"},
		{[]string{"serve", "--model-dir", file, "--port", "0"}, "not a directory"},
	}
	for _, c := range cases {
		_, stderr, err := run(t, c.args...)
		if err == nil || !strings.Contains(stderr, c.want) {
			t.Errorf("distflow %s: err %v, stderr %q; want a failure mentioning %q", strings.Join(c.args, " "), err, stderr, c.want)
		}
	}
}

// TestServeModelConfigFile serves two models from a config file as
// tensorflow_model_server reads it: each answers under its name.
func TestServeModelConfigFile(t *testing.T) {
	dir := t.TempDir()
	var conf strings.Builder
	conf.WriteString("model_config_list {\n")
	for i, name := range []string{"first", "second"} {
		b, err := savedmodeltest.MLP(i + 1)
		if err != nil {
			t.Fatal(err)
		}
		base := filepath.Join(dir, name)
		if _, _, err := savedmodel.WriteVersion(base, b.Model); err != nil {
			t.Fatal(err)
		}
		b.Close()
		fmt.Fprintf(&conf, "  config { name: %q base_path: %q model_platform: \"tensorflow\" }\n", name, base)
	}
	conf.WriteString("}\n")
	file := filepath.Join(dir, "models.config")
	if err := os.WriteFile(file, []byte(conf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	url := startServe(t, "--model_config_file", file, "--port", "0")
	root := url[:strings.Index(url, "/v1/")]
	row := "[" + strings.TrimSuffix(strings.Repeat("0.5,", 784), ",") + "]"
	var probs []string
	for _, name := range []string{"first", "second"} {
		resp, err := http.Post(root+"/v1/models/"+name+":predict", "application/json", strings.NewReader(`{"instances":[`+row+`]}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", name, resp.StatusCode, body)
		}
		probs = append(probs, string(body))
	}
	if probs[0] == probs[1] {
		t.Error("the two models (different seeds) answered the same: one served both names")
	}
	if _, _, err := run(t, "serve", "--model-config-file", file, "--model-dir", dir, "--port", "0"); err == nil {
		t.Error("--model-config-file with --model-dir was accepted")
	}
}

// TestServeDropsHostileClients: with --read-timeout, a client that sends
// its body too slowly is answered 408 and cut off while another client's
// predictions succeed; a Content-Length over --max-body-bytes is answered
// 413 before any of the body is sent.
func TestServeDropsHostileClients(t *testing.T) {
	b, err := savedmodeltest.MLP(1)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	base := t.TempDir()
	if _, _, err := savedmodel.WriteVersion(base, b.Model); err != nil {
		t.Fatal(err)
	}
	url := startServe(t, "--model-dir", base, "--port", "0", "--read-timeout", "500ms", "--max-body-bytes", "1000000")
	addr := strings.TrimPrefix(url[:strings.Index(url, "/v1/")], "http://")
	send := func(head string) (*http.Response, string) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetReadDeadline(time.Now().Add(20 * time.Second)) // a held connection fails the test
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(body)
	}
	row := "[" + strings.TrimSuffix(strings.Repeat("0.5,", 784), ",") + "]"
	done := make(chan error, 1)
	go func() {
		for range 20 {
			resp, err := http.Post(url+":predict", "application/json", strings.NewReader(`{"instances":[`+row+`]}`))
			if err != nil {
				done <- err
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				done <- fmt.Errorf("predict: status %d", resp.StatusCode)
				return
			}
		}
		done <- nil
	}()
	start := time.Now()
	resp, body := send("POST /v1/models/default:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n{\"instances\": [")
	if resp.StatusCode != http.StatusRequestTimeout || time.Since(start) < 500*time.Millisecond {
		t.Errorf("slow body: %d %s after %v, want 408 after the read timeout", resp.StatusCode, body, time.Since(start))
	}
	if err := <-done; err != nil {
		t.Errorf("another client: %v", err)
	}
	resp, body = send(fmt.Sprintf("POST /v1/models/default:predict HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", int64(8)<<30))
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, "limit of 1000000 bytes") {
		t.Errorf("8 GiB announced: %d %s, want 413", resp.StatusCode, body)
	}
}

// syncBuffer is a strings.Builder safe for a process's writes while the
// test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestServeWaitsForFirstVersion starts distflow serve on a model directory
// that does not exist yet, as when it is started with the training job: it
// listens, says what it waits for (naming distflow train --export), answers
// 503 on the model's status and predict endpoints, and serves the first
// complete version as soon as it is written.
func TestServeWaitsForFirstVersion(t *testing.T) {
	base := filepath.Join(t.TempDir(), "mlp")
	cmd := exec.Command(binary, "serve", "--model-dir", base, "--port", "0", "--model-name", "mlp", "--poll-interval", "20ms")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("distflow serve after SIGTERM: %v; stderr:\n%s", err, stderr.String())
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Error("distflow serve did not exit after SIGTERM")
		}
	}()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		io.Copy(io.Discard, stdout)
	}()
	var line string
	select {
	case line = <-lines:
	case err := <-exited:
		t.Fatalf("distflow serve exited (%v) instead of waiting for a version; stderr:\n%s", err, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("no line from distflow serve; stderr:\n%s", stderr.String())
	}
	m := regexp.MustCompile(`(http://127\.0\.0\.1:\d+/v1/models/mlp)$`).FindStringSubmatch(line)
	if m == nil || !strings.Contains(line, "distflow train --export "+base) {
		t.Fatalf("first line %q does not give the URL and how to export a version; stderr:\n%s", line, stderr.String())
	}
	url := m[1]
	get := func() (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(body)
	}
	if code, body := get(); code != http.StatusServiceUnavailable || !strings.Contains(body, "Could not find any versions of model mlp") {
		t.Errorf("status before a version: %d %s, want 503", code, body)
	}
	row := "[" + strings.TrimSuffix(strings.Repeat("0.5,", 784), ",") + "]"
	resp, err := http.Post(url+":predict", "application/json", strings.NewReader(`{"instances":[`+row+`]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("predict before a version: %d, want 503", resp.StatusCode)
	}
	if s := stderr.String(); !strings.Contains(s, "waiting for the model's first version") || !strings.Contains(s, base) {
		t.Errorf("the log does not say what the server waits for:\n%s", s)
	}

	b, err := savedmodeltest.MLP(1)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, _, err := savedmodel.WriteVersion(base, b.Model); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := get()
		if code == http.StatusOK && strings.Contains(body, `"AVAILABLE"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status 30s after the first version was written: %d %s; stderr:\n%s", code, body, stderr.String())
		}
		time.Sleep(10 * time.Millisecond) // poll interval of the deadline loop, not a synchronisation
	}
	resp, err = http.Post(url+":predict", "application/json", strings.NewReader(`{"instances":[`+row+`]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "probabilities") {
		t.Errorf("predict after the first version: %d %s", resp.StatusCode, body)
	}
}
