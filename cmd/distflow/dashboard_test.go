package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/distflow/distflow/dashboard"
	"github.com/distflow/distflow/internal/browser"
)

var dashboardLine = regexp.MustCompile(`dashboard: (http://\S+/)`)

// waitDashboardURL reads lines until the dashboard's URL.
func waitDashboardURL(t *testing.T, lines <-chan string, logs func() string) string {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("output ended before the dashboard's URL:\n%s", logs())
			}
			if m := dashboardLine.FindStringSubmatch(l); m != nil {
				return m[1]
			}
		case <-deadline:
			t.Fatalf("no dashboard URL within a minute:\n%s", logs())
		}
	}
}

// freePorts returns n loopback ports free a moment ago (for --metrics-port).
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// apiCluster reads the dashboard's /api/cluster.
func apiCluster(t *testing.T, url string) []dashboard.TaskStatus {
	t.Helper()
	resp, err := http.Get(url + "api/cluster")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var c struct{ Tasks []dashboard.TaskStatus }
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	return c.Tasks
}

// page is the dashboard open in the browser.
type page struct {
	t   *testing.T
	ctx context.Context
	dir string
}

// wait waits until expr is true in the page, within d.
func (p page) wait(expr string, d time.Duration) {
	p.t.Helper()
	if _, err := chromedp.Run(p.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(d), chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
		text, _ := chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.body.innerText.slice(0, 3000)`))
		p.t.Fatalf("waiting for %s: %v\nthe page:\n%s", expr, err, text)
	}
}

// step is the global step the page shows.
func (p page) step() int {
	p.t.Helper()
	s, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.getElementById("global-step").textContent`))
	if err != nil {
		p.t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.ReplaceAll(s, ",", ""))
	if err != nil {
		p.t.Fatalf("the page's global step %q: %v", s, err)
	}
	return n
}

func (p page) shot(name string) {
	p.t.Helper()
	f, err := browser.Screenshot(p.ctx, p.dir, name)
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot %s", f)
}

// openDashboard opens url in a fresh headless Chromium.
func openDashboard(t *testing.T, url string) page {
	t.Helper()
	bctx := browser.Start(t, 1400, 1000)
	ctx, cancel := context.WithTimeout(bctx, 2*time.Minute)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	return page{t: t, ctx: ctx, dir: browser.ScreenshotDir(t)}
}

// cardsJS is true when the page has a card for each task, running.
func cardsJS(names []string, state string) string {
	var conds []string
	for _, n := range names {
		conds = append(conds, fmt.Sprintf(`(document.querySelector('[data-task="%s"]') || {dataset: {}}).dataset.state === %q`, n, state))
	}
	return strings.Join(conds, " && ")
}

// TestDashboardChiefInChromium trains on a cluster of real processes (a ps
// and three workers, started by hand as on separate machines) whose chief
// serves the dashboard, opens it in headless Chromium, and checks that
// every task appears, that a slow worker (--step-delay) is marked as a
// straggler, that the step counter moves between two screenshots, and that
// a worker killed with SIGKILL shows as lost within the heartbeat
// deadline.
func TestDashboardChiefInChromium(t *testing.T) {
	if browser.Path() == "" {
		t.Skip("no chromium: install Debian's chromium (apt-get install -y chromium; .ci/run does) or set DISTFLOW_CHROMIUM")
	}
	files, addrs := freeListeners(t, 4)
	mports := freePorts(t, 4)
	common := []string{"train", "--model", "mlp", "--steps", "100000000", "--log-every", "100", "--wait-timeout", "60s",
		"--ps_hosts", addrs[0], "--worker_hosts", strings.Join(addrs[1:], ",")}
	var tasks []*task
	names := []string{"/job:ps/task:0", "/job:worker/task:0", "/job:worker/task:1", "/job:worker/task:2"}
	for i := range 4 {
		job, index := "worker", i-1
		if i == 0 {
			job, index = "ps", 0
		}
		args := append(append([]string(nil), common...), "--job_name", job, "--task_index", strconv.Itoa(index),
			"--metrics-port", strconv.Itoa(mports[i]), "--dashboard", "127.0.0.1:0")
		if names[i] == "/job:worker/task:2" {
			args = append(args, "--step-delay", "60ms") // a slow machine
		}
		tasks = append(tasks, startTestTask(t, names[i], files[i], args...))
	}
	chief := tasks[1]
	url := waitDashboardURL(t, chief.seen, chief.logs)
	t.Logf("dashboard at %s", url)

	p := openDashboard(t, url)
	p.wait(cardsJS(names[:3], "running")+` && document.getElementById("global-step").textContent !== "–"`, 60*time.Second)
	// The slow worker is marked once its rate is measured.
	p.wait(cardsJS(names[3:], "straggler"), 30*time.Second)
	p.wait(`document.querySelector("#graph svg") !== null`, 30*time.Second)
	first := p.step()
	p.shot("1-running")
	p.wait(fmt.Sprintf(`+document.getElementById("global-step").textContent.replace(/,/g, "") > %d`, first), 30*time.Second)
	p.shot("2-later")
	if second := p.step(); second <= first {
		t.Fatalf("the step counter did not move: %d then %d", first, second)
	}
	for _, s := range apiCluster(t, url) {
		if s.MetricsURL == "" || s.State != dashboard.StateRunning && s.State != dashboard.StateStraggler {
			t.Errorf("/api/cluster: %+v, want it up with its metrics URL", s)
		}
	}

	// A worker dies without a word.
	victim := tasks[3]
	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// Lost once it has not answered for the heartbeat deadline: a poll
	// (1 s) later, and a second for the page to hear of it.
	deadline := dashboard.DefaultLostAfter + 2*dashboard.DefaultInterval + time.Second
	p.wait(fmt.Sprintf(`document.querySelector('[data-task="%s"]').dataset.state === "lost"`, names[3]), deadline+10*time.Second)
	took := time.Since(killed)
	p.shot("3-worker-lost")
	t.Logf("the killed worker showed as lost after %v (heartbeat deadline %v)", took.Round(time.Millisecond), dashboard.DefaultLostAfter)
	if took > deadline {
		t.Errorf("the killed worker showed as lost after %v, want within %v", took, deadline)
	}
	// Silence counts from the last answer, which may precede the kill by
	// up to one poll.
	if earliest := dashboard.DefaultLostAfter - dashboard.DefaultInterval; took < earliest {
		t.Errorf("the killed worker showed as lost after %v, before the heartbeat deadline %v less one poll", took, dashboard.DefaultLostAfter)
	}
	p.wait(cardsJS(names[:3], "running")+` && document.querySelector("#events .kind.lost") !== null`, 10*time.Second)
}

// TestDashboardLocalClusterInChromium serves the dashboard from the
// launcher of a local cluster: the chief reports the cluster and its graph
// to it, every task appears with its metrics, the step moves, and the
// chief's step trace is drawn.
func TestDashboardLocalClusterInChromium(t *testing.T) {
	if browser.Path() == "" {
		t.Skip("no chromium: install Debian's chromium (apt-get install -y chromium; .ci/run does) or set DISTFLOW_CHROMIUM")
	}
	cmd := exec.Command(binary, "train", "--model", "mlp", "--steps", "100000000", "--local-cluster", "ps=1,worker=2",
		"--dashboard", "127.0.0.1:0", "--logdir", t.TempDir(), "--trace-steps", "2")
	cmd.SysProcAttr = childAttrs()
	lines := startStreaming(t, cmd)
	url := waitDashboardURL(t, lines, func() string { return "" })
	p := openDashboard(t, url)
	names := []string{"/job:ps/task:0", "/job:worker/task:0", "/job:worker/task:1"}
	p.wait(cardsJS(names, "running")+` && document.querySelector("#graph svg") !== null`, 60*time.Second)
	p.wait(`+document.getElementById("global-step").textContent.replace(/,/g, "") > 0`, 30*time.Second)
	first := p.step()
	p.shot("1-local-cluster")
	p.wait(fmt.Sprintf(`+document.getElementById("global-step").textContent.replace(/,/g, "") > %d`, first), 30*time.Second)
	// The chief's step trace (--trace-steps) is drawn as a timeline.
	p.wait(`document.querySelector("#trace canvas") !== null`, 30*time.Second)
	p.shot("2-local-cluster-later")
	tasks := apiCluster(t, url)
	if len(tasks) != 3 {
		t.Fatalf("/api/cluster has %d tasks, want 3: %+v", len(tasks), tasks)
	}
	for _, s := range tasks {
		resp, err := http.Get(s.MetricsURL)
		if err != nil {
			t.Fatalf("%s's metrics at %q: %v", s.Name, s.MetricsURL, err)
		}
		fams, err := dashboard.ParseMetrics(resp.Body)
		resp.Body.Close()
		if err != nil || fams["distflow_global_step"] == nil {
			t.Errorf("%s's metrics: %v (%d families)", s.Name, err, len(fams))
		}
	}
}
