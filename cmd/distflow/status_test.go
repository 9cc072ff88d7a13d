package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/distflow/distflow/cluster"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/server"
)

// runStatus runs `distflow status args...` in-process.
func runStatus(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"status"}, args...))
	err := root.Execute()
	return out.String(), err
}

// startStatusTask serves a one-task cluster in-process on l.
func startStatusTask(t *testing.T, l net.Listener) {
	t.Helper()
	spec, err := cluster.NewSpec(map[string][]string{"worker": {l.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Cluster: spec, Task: cluster.TaskID{Job: "worker"}, Listener: l})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
}

// TestStatus asks real tasks, written the ways a user may write them.
func TestStatus(t *testing.T) {
	l4, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	startStatusTask(t, l4)
	_, port, _ := net.SplitHostPort(l4.Addr().String())
	cases := []struct{ name, arg string }{
		{"host:port", "127.0.0.1:" + port},
		{"localhost:port", "localhost:" + port},
	}
	if l6, err := net.Listen("tcp", "[::1]:0"); err == nil {
		startStatusTask(t, l6)
		_, p6, _ := net.SplitHostPort(l6.Addr().String())
		cases = append(cases, struct{ name, arg string }{"[v6]:port", "[::1]:" + p6})
	} else {
		t.Logf("no IPv6 loopback: %v", err)
	}
	// The default port, when this machine lets the test have it.
	if ld, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", "2222")); err == nil {
		startStatusTask(t, ld)
		cases = append(cases, struct{ name, arg string }{"host alone", "127.0.0.1"})
	} else {
		t.Logf("port 2222 is taken, the bare host is not tried: %v", err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runStatus(t, "--json", "--timeout", "10s", tc.arg)
			if err != nil {
				t.Fatal(err)
			}
			var sts []*pb.GetStatusResponse
			if err := json.Unmarshal([]byte(out), &sts); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, out)
			}
			if len(sts) != 1 || sts[0].GetTask() != "/job:worker/task:0" {
				t.Errorf("statuses = %v", sts)
			}
		})
	}
	t.Run("text", func(t *testing.T) {
		out, err := runStatus(t, "127.0.0.1:"+port)
		if err != nil || !strings.HasPrefix(out, "/job:worker/task:0 (") {
			t.Errorf("status = %q, %v", out, err)
		}
	})
}

// TestStatusErrors checks the rejections: bad flags and addresses before any
// call, and a task that does not answer within the timeout.
func TestStatusErrors(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	silent := l.Addr().String()
	l.Close() // nothing listens there now
	for _, tc := range []struct {
		name  string
		args  []string
		want  []string
		limit time.Duration // the command must fail within this
	}{
		{"zero timeout", []string{"--timeout", "0", "h"}, []string{"--timeout 0s", "positive"}, time.Second},
		{"negative timeout", []string{"--timeout=-1s", "h"}, []string{"--timeout -1s", "positive"}, time.Second},
		{"bad address", []string{"h@x"}, []string{`bad address "h@x"`, "'@'"}, time.Second},
		{"bad port", []string{"h:x"}, []string{`bad address "h:x"`, `port "x"`}, time.Second},
		{"IPv6 without brackets", []string{"::1"}, []string{`"::1"`, "[::1]:2222"}, time.Second},
		{"bad address after a good one", []string{"--timeout", "1m", silent, "h:"}, []string{`bad address "h:"`}, time.Second},
		{"nothing listening", []string{"--timeout", "500ms", silent}, []string{"no answer from " + silent + " within 500ms"}, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := runStatus(t, tc.args...)
			if took := time.Since(start); took > tc.limit {
				t.Errorf("failed after %v, want within %v", took, tc.limit)
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestStatusShowsDeviceMemory: a task's accelerators are listed with the
// memory of their allocators, read from its metrics, in the text and in
// the JSON (whose other fields stay those of the status).
func TestStatusShowsDeviceMemory(t *testing.T) {
	const exposition = `# TYPE distflow_device_memory_bytes gauge
distflow_device_memory_bytes{card="0",device="GPU:0",job="worker",kind="in_use",logical_gpu="1",platform="sim",task="0"} 1048576
distflow_device_memory_bytes{card="0",device="GPU:0",job="worker",kind="limit",logical_gpu="1",platform="sim",task="0"} 4.83183616e+08
distflow_device_memory_bytes{card="0",device="GPU:0",job="worker",kind="peak",logical_gpu="1",platform="sim",task="0"} 2097152
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, exposition)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	st := &pb.GetStatusResponse{Task: "/job:worker/task:0", Devices: []string{"/job:worker/task:0/cpu:0", "/job:worker/task:0/gpu:0"}, MetricsAddress: addr}
	r := taskReport{GetStatusResponse: st}
	r.DeviceMemory, r.deviceErr = deviceMemory(context.Background(), addr, 5*time.Second)
	if r.deviceErr != nil {
		t.Fatal(r.deviceErr)
	}
	var out bytes.Buffer
	printStatus(&out, r)
	if want := "GPU:0 (sim, card 0, logical GPU 1): 1.0 MiB in use, peak 2.0 MiB, limit 460.8 MiB"; !strings.Contains(out.String(), want) {
		t.Errorf("status does not say %q:\n%s", want, out.String())
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Task    string `json:"task"`
		Devices []struct {
			Name  string `json:"name"`
			Limit int64  `json:"limit_bytes"`
		} `json:"device_memory"`
	}
	if err := json.Unmarshal(b, &back); err != nil || back.Task != st.Task || len(back.Devices) != 1 || back.Devices[0].Limit != 483183616 {
		t.Errorf("JSON %s: %+v, %v", b, back, err)
	}
	// A task whose metrics do not answer is shown, saying so.
	r = taskReport{GetStatusResponse: st}
	r.DeviceMemory, r.deviceErr = deviceMemory(context.Background(), "127.0.0.1:1", time.Second)
	out.Reset()
	printStatus(&out, r)
	if !strings.Contains(out.String(), "device memory: no answer") {
		t.Errorf("an unreachable metrics endpoint is not reported:\n%s", out.String())
	}
}
