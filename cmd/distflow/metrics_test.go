package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/metrics"
	"github.com/distflow/distflow/metrics/metricstest"
)

// TestLocalClusterMetrics runs a real local cluster (three processes),
// finds every task's metrics endpoint (each logs its URL with -v), and
// scrapes each twice with Prometheus' parser: every scrape parses, every
// series carries the task's job and task labels, distflow's names are the
// contract's, and the counters move between the scrapes (steps and
// examples on the workers, RPC and tensor bytes on every task).
func TestLocalClusterMetrics(t *testing.T) {
	cmd := exec.Command(binary, "train", "-v", "--model", "linreg", "--steps", "100000000", "--log-every", "50",
		"--local-cluster", "ps=1,worker=2")
	lines := startStreaming(t, cmd)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// "[ps 0] time=... msg="serving metrics" url=http://127.0.0.1:PORT/metrics"
	re := regexp.MustCompile(`^\[(\w+) (\d+)\] .*serving metrics.* url=(\S+)`)
	progress := regexp.MustCompile(`^\[(worker \d+)\] .*local_step`)
	urls := map[string]string{} // by "job/index"
	stepping := map[string]bool{}
	for len(urls) < 3 || len(stepping) < 2 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the launcher exited; metrics found: %v", urls)
			}
			if m := re.FindStringSubmatch(l); m != nil {
				urls[m[1]+"/"+m[2]] = m[3]
			}
			if m := progress.FindStringSubmatch(l); m != nil {
				stepping[m[1]] = true
			}
		case <-ctx.Done():
			t.Fatalf("not every task served metrics and trained within a minute: %v, training: %v", urls, stepping)
		}
	}
	scrape := func() map[string]metricstest.Families {
		all := map[string]metricstest.Families{}
		for task, url := range urls {
			fams, err := metricstest.Scrape(ctx, url)
			if err != nil {
				t.Fatalf("%s: %v", task, err)
			}
			job, index, _ := strings.Cut(task, "/")
			if err := fams.CheckTaskLabels(job, index); err != nil {
				t.Errorf("%s: %v", task, err)
			}
			for name := range fams {
				if strings.HasPrefix(name, "distflow_") && !slices.Contains(metrics.Names, name) {
					t.Errorf("%s serves %s, which is not in metrics.Names", task, name)
				}
			}
			for _, name := range []string{metrics.StepSeconds, metrics.ExamplesTotal, metrics.RPCSeconds,
				metrics.TensorChannelBytesTotal, "process_cpu_seconds_total", "process_resident_memory_bytes", "go_goroutines"} {
				if fams[name] == nil {
					t.Errorf("%s serves no %s", task, name)
				}
			}
			all[task] = fams
		}
		return all
	}
	first := scrape()
	// Two new progress lines from each worker: both trained in between.
	drain(lines)
	seen := map[string]int{}
	for seen["worker 0"] < 2 || seen["worker 1"] < 2 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the launcher exited during the run")
			}
			if m := progress.FindStringSubmatch(l); m != nil {
				seen[m[1]]++
			}
		case <-ctx.Done():
			t.Fatalf("the workers stopped training: %v", seen)
		}
	}
	second := scrape()
	grows := func(task, name string, labels map[string]string) {
		a, b := first[task].Sum(name, labels), second[task].Sum(name, labels)
		if !(b > a) {
			t.Errorf("%s: %s%v went %v -> %v, want it to grow", task, name, labels, a, b)
		}
	}
	for _, w := range []string{"worker/0", "worker/1"} {
		grows(w, metrics.StepSeconds, nil)
		grows(w, metrics.ExamplesTotal, nil)
		grows(w, metrics.GlobalStep, nil)
		grows(w, metrics.RPCSentBytesTotal, map[string]string{"peer": "/job:ps/task:0", "method": "RunGraph"})
		grows(w, metrics.RPCSeconds, map[string]string{"peer": "/job:ps/task:0", "method": "RunGraph"})
		grows(w, metrics.TensorChannelBytesTotal, map[string]string{"direction": metrics.Received})
	}
	grows("ps/0", metrics.TensorChannelBytesTotal, map[string]string{"direction": metrics.Sent})
	grows("ps/0", metrics.RPCReceivedBytesTotal, map[string]string{"method": "RecvTensor"})
	grows("ps/0", "process_cpu_seconds_total", nil)

	// Prometheus' own linter, where installed (Debian's prometheus).
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed: the lint of the scrapes is skipped")
		return
	}
	for task, url := range urls {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		lint := exec.CommandContext(ctx, promtool, "check", "metrics")
		lint.Stdin = resp.Body
		out, err := lint.CombinedOutput()
		resp.Body.Close()
		if err != nil {
			t.Errorf("%s: promtool check metrics: %v\n%s", task, err, out)
		}
	}
}

// drain discards the lines already read.
func drain(lines <-chan string) {
	for {
		select {
		case <-lines:
		default:
			return
		}
	}
}

// TestMetricsPortFlag checks --metrics-port's refusals.
func TestMetricsPortFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"train", "--model", "linreg", "--local-cluster", "ps=1,worker=1", "--metrics-port", "9100"}, "every task gets a free loopback port"},
		{[]string{"server", "--ps_hosts", "127.0.0.1:1", "--worker_hosts", "127.0.0.1:2", "--job_name", "ps", "--metrics-port", "70000"}, "--metrics-port 70000"},
	} {
		_, stderr, err := run(t, c.args...)
		if err == nil || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: err %v, stderr %q; want %q", c.args, err, stderr, c.want)
		}
	}
}

// TestMetricsFollowListenAddress: a task told by DISTFLOW_LISTEN_ADDRESS to
// serve somewhere else than its address in TF_CONFIG (a pod whose own name
// may not resolve yet) serves its metrics on that host too. The TF_CONFIG
// address here is 127.0.0.3, where nothing listens: the one-worker ring
// never dials it, and the metrics must not go there.
func TestMetricsFollowListenAddress(t *testing.T) {
	fl := pflag.NewFlagSet("train", pflag.ContinueOnError)
	var f trainFlags
	addMetricsFlag(fl, &f.metricsPort, false)
	if err := fl.Parse([]string{"--metrics-port=9100"}); err != nil {
		t.Fatal(err)
	}
	spec, err := cluster.NewSpec(map[string][]string{"worker": {"mnist-worker-0.mnist:2222"}})
	if err != nil {
		t.Fatal(err)
	}
	for listen, want := range map[string]string{"": "mnist-worker-0.mnist:9100", ":2222": ":9100", "10.1.2.3:2222": "10.1.2.3:9100", "nonsense": "DISTFLOW_LISTEN_ADDRESS"} {
		t.Setenv(envListenAddress, listen)
		got, err := trainMetricsAddress(f, fl, spec, cluster.TaskID{Job: "worker"})
		if got != want && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s=%q: metrics on %q, %v; want %q", envListenAddress, listen, got, err, want)
		}
	}

	files, addrs := freeListeners(t, 2) // a port for gRPC, one for metrics
	files[0].Close()
	files[1].Close()
	_, port, _ := net.SplitHostPort(addrs[0])
	_, mport, _ := net.SplitHostPort(addrs[1])
	cmd := exec.Command(binary, "train", "-v", "--model", "linreg", "--steps", "20", "--allreduce", "--metrics-port", mport)
	cmd.Env = append(os.Environ(),
		cluster.EnvVar+`={"cluster": {"worker": ["127.0.0.3:`+port+`"]}, "task": {"type": "worker", "index": 0}}`,
		envListenAddress+"="+addrs[0])
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("distflow train: %v\n%s", err, out)
	}
	if want := "serving metrics\" url=http://127.0.0.1:" + mport + "/metrics"; !strings.Contains(string(out), want) {
		t.Errorf("the task's log lacks %q:\n%s", want, out)
	}
}
