package dashboard

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// newFake returns a dashboard over a fake cluster, with a clock the test
// moves.
func newFake(t *testing.T, spec map[string][]string) (*Dashboard, *fakeCluster, *clock) {
	t.Helper()
	fc := newFakeCluster(spec)
	d, err := New(Config{Tasks: TasksOf(spec), Prober: fc, LostAfter: 3 * time.Second, Title: "fake",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	d.now, d.start = c.now, c.now()
	return d, fc, c
}

func getJSON(t *testing.T, h http.Handler, path string, v any) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

type clusterJSON struct {
	Tasks []TaskStatus `json:"tasks"`
}

func byName(ts []TaskStatus) map[string]TaskStatus {
	m := map[string]TaskStatus{}
	for _, s := range ts {
		m[s.Name] = s
	}
	return m
}

// TestCluster64 polls a fake cluster of 64 tasks: /api/cluster lists every
// one with its metrics URL and step; a task that stops answering is lost
// after the heartbeat deadline, not before; a slow worker is a straggler.
func TestCluster64(t *testing.T) {
	spec := fakeSpec(55, 8)
	d, fc, c := newFake(t, spec)
	ctx := context.Background()
	h := d.Handler()

	var cl clusterJSON
	getJSON(t, h, "/api/cluster", &cl)
	if len(cl.Tasks) != 64 || cl.Tasks[0].State != StateStarting {
		t.Fatalf("before a poll: %d tasks, first %+v", len(cl.Tasks), cl.Tasks[0])
	}
	d.Poll(ctx)
	fc.step(10, 0.01)
	c.add(time.Second)
	d.Poll(ctx)
	getJSON(t, h, "/api/cluster", &cl)
	if len(cl.Tasks) != 64 {
		t.Fatalf("%d tasks, want 64", len(cl.Tasks))
	}
	if cl.Tasks[0].Name != "/job:chief/task:0" || cl.Tasks[63].Name != "/job:ps/task:7" {
		t.Errorf("order: first %s, last %s; want the chief first and the ps last", cl.Tasks[0].Name, cl.Tasks[63].Name)
	}
	for _, s := range cl.Tasks {
		if s.State != StateRunning || s.GlobalStep != 10 || s.MetricsURL != "http://m-"+s.Address+"/metrics" || s.StepRate != 10 {
			t.Fatalf("task %+v: want running at step 10, 10 steps/s, with its metrics URL", s)
		}
	}

	// worker 3 dies; worker 7 slows down.
	dead, slow := spec["worker"][3], spec["worker"][7]
	fc.task(dead).alive = false
	for range 3 {
		fc.step(10, 0.01, slow)
		fc.step(2, 0.05)
		c.add(time.Second)
		d.Poll(ctx)
	}
	m := byName(d.snapshot().Tasks)
	if s := m["/job:worker/task:3"]; s.State != StateLost {
		// 3 s without an answer: exactly the deadline, not past it.
		if s.State != StateRunning || s.HeartbeatAge != 3 {
			t.Fatalf("dead worker after 3 s: %+v", s)
		}
	}
	if s := m["/job:worker/task:7"]; s.State != StateStraggler {
		t.Errorf("slow worker: %+v, want a straggler", s)
	}
	c.add(time.Second)
	d.Poll(ctx)
	m = byName(d.snapshot().Tasks)
	if s := m["/job:worker/task:3"]; s.State != StateLost || s.HeartbeatAge != 4 || s.Error == "" {
		t.Fatalf("dead worker after 4 s: %+v, want lost with its error", s)
	}
	// It comes back as a new process.
	fc.mu.Lock()
	fc.tasks[dead].alive, fc.tasks[dead].incarnation = true, 2
	fc.tasks[spec["chief"][0]].checkpoints++
	fc.tasks[spec["worker"][0]].stale += 3
	fc.mu.Unlock()
	c.add(time.Second)
	d.Poll(ctx)
	s := d.snapshot()
	if w3 := byName(s.Tasks)["/job:worker/task:3"]; w3.State != StateRunning || w3.Restarts != 1 {
		t.Errorf("restarted worker: %+v", w3)
	}
	var kinds []string
	for _, e := range s.Events {
		if e.Kind != "started" {
			kinds = append(kinds, e.Kind+" "+e.Task)
		}
	}
	want := []string{"straggler /job:worker/task:7", "lost /job:worker/task:3", "restarted /job:worker/task:3",
		"checkpoint /job:chief/task:0", "stale /job:worker/task:0"}
	sort.Strings(kinds)
	sort.Strings(want)
	if strings.Join(kinds, ",") != strings.Join(want, ",") {
		t.Errorf("events:\n%s\nwant\n%s", strings.Join(kinds, "\n"), strings.Join(want, "\n"))
	}
	var hist Snapshot
	getJSON(t, h, "/api/history", &hist)
	last := hist.History[len(hist.History)-1]
	if len(hist.History) != 7 || last.GlobalStep != 46 || last.Loss == nil || last.Accuracy == nil ||
		len(last.StepSeconds) != 56 || hist.History[4].StepSeconds["/job:worker/task:0"] == nil {
		t.Errorf("history: %d points, last %+v", len(hist.History), hist.History[len(hist.History)-1])
	}

	// After training, the tasks that go away are done.
	d.Finished()
	fc.task(spec["ps"][0]).alive = false
	c.add(time.Second)
	d.Poll(ctx)
	if ps := byName(d.snapshot().Tasks)["/job:ps/task:0"]; ps.State != StateDone {
		t.Errorf("ps after training: %+v, want done", ps)
	}
}

func (d *Dashboard) snapshot() Snapshot {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.snapshotLocked(d.now(), false)
}

// TestEventsStream reads two snapshots from /api/events over a real
// HTTP connection.
func TestEventsStream(t *testing.T) {
	d, fc, c := newFake(t, fakeSpec(2, 1))
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d.Poll(ctx)
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	next := func() Snapshot {
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var s Snapshot
				if err := json.Unmarshal([]byte(data), &s); err != nil {
					t.Fatal(err)
				}
				return s
			}
		}
		t.Fatalf("stream ended: %v", sc.Err())
		return Snapshot{}
	}
	first := next() // the last snapshot, at once
	fc.step(5, 0.01)
	c.add(time.Second)
	d.Poll(ctx)
	second := next()
	if first.Seq != 1 || second.Seq != 2 || second.Point == nil || second.Point.GlobalStep != 5 || len(second.Tasks) != 4 {
		t.Fatalf("snapshots %d then %d: %+v", first.Seq, second.Seq, second.Point)
	}
}

// TestReport checks that /api/report wants the token and sets the cluster,
// the graph and the end of training.
func TestReport(t *testing.T) {
	fc := newFakeCluster(fakeSpec(2, 1))
	d, err := New(Config{Prober: fc, ReportToken: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	h := d.Handler()
	post := func(token, body string) int {
		req := httptest.NewRequest("POST", "/api/report", strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	spec, _ := json.Marshal(Report{Cluster: fakeSpec(2, 1), Graph: &Graph{Nodes: []Node{{Name: "w", Op: "Variable", Task: "/job:ps/task:0"}}}})
	if c := post("", string(spec)); c != http.StatusForbidden {
		t.Errorf("no token: %d", c)
	}
	if c := post("wrong", string(spec)); c != http.StatusForbidden {
		t.Errorf("wrong token: %d", c)
	}
	if c := post("s3cret", `{"cluster": {"worker": [""]}}`); c != http.StatusBadRequest {
		t.Errorf("empty address: %d", c)
	}
	if c := post("s3cret", string(spec)); c != http.StatusNoContent {
		t.Fatalf("report: %d", c)
	}
	var cl clusterJSON
	getJSON(t, h, "/api/cluster", &cl)
	var g Graph
	getJSON(t, h, "/api/graph", &g)
	if len(cl.Tasks) != 4 || len(g.Nodes) != 1 {
		t.Errorf("after the report: %d tasks, %d nodes", len(cl.Tasks), len(g.Nodes))
	}
	if c := post("s3cret", `{"finished": true}`); c != http.StatusNoContent || !d.finished {
		t.Errorf("finished: %d %v", c, d.finished)
	}
	noToken, _ := New(Config{Prober: fc})
	req := httptest.NewRequest("POST", "/api/report", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer ")
	rec := httptest.NewRecorder()
	noToken.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Errorf("a dashboard without a token accepted a report: %d", rec.Code)
	}
}

// TestPageAndTrace checks that the page and its assets are embedded and
// that the newest trace is served.
func TestPageAndTrace(t *testing.T) {
	dir := t.TempDir()
	fc := newFakeCluster(nil)
	d, err := New(Config{Prober: fc, TraceDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	h := d.Handler()
	for path, want := range map[string]string{"/": "<title>distflow dashboard", "/static/app.js": "EventSource",
		"/static/uPlot.iife.min.js": "uPlot", "/static/style.css": ".task.lost", "/static/uPlot.LICENSE": "MIT"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if body, _ := io.ReadAll(rec.Body); rec.Code != 200 || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %d, want %q in it", path, rec.Code, want)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/trace/latest.json", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("no trace: %d", rec.Code)
	}
	old, now := time.Now().Add(-time.Minute), time.Now()
	for name, mt := range map[string]time.Time{"a.json": old, "b.json": now, "c.txt": now.Add(time.Minute)} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(`{"traceEvents":[],"name":"`+name+`"}`), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/trace/latest.json", nil))
	if !strings.Contains(rec.Body.String(), "b.json") {
		t.Errorf("latest trace: %s, want b.json", rec.Body)
	}
	// The trace writers' names win, by step rather than time.
	for name, mt := range map[string]time.Time{"trace-9.json": now, "trace-10.json": old} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(`{"traceEvents":[],"name":"`+name+`"}`), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/trace/latest.json", nil))
	if !strings.Contains(rec.Body.String(), "trace-10.json") {
		t.Errorf("latest trace: %s, want trace-10.json", rec.Body)
	}
}

func TestConfigErrors(t *testing.T) {
	if _, err := New(Config{}); err == nil || !strings.Contains(err.Error(), "Prober") {
		t.Errorf("no prober: %v", err)
	}
	fc := newFakeCluster(nil)
	if _, err := New(Config{Prober: fc, LostAfter: -1}); err == nil {
		t.Error("negative LostAfter accepted")
	}
	if _, err := New(Config{Prober: fc, Tasks: []Task{{Job: "worker", Address: "a"}, {Job: "worker", Address: "b"}}}); err == nil ||
		!strings.Contains(err.Error(), "twice") {
		t.Errorf("a task twice: %v", err)
	}
}

// TestServe serves a dashboard on a real listener: it polls by itself,
// streams snapshots, and returns once its context ends although a page is
// still connected.
func TestServe(t *testing.T) {
	fc := newFakeCluster(fakeSpec(2, 1))
	d, err := New(Config{Tasks: TasksOf(fakeSpec(2, 1)), Prober: fc, Interval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- d.Serve(ctx, lis) }()
	resp, err := http.Get("http://" + lis.Addr().String() + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	var seqs []uint64
	for len(seqs) < 3 && sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var s Snapshot
			if err := json.Unmarshal([]byte(data), &s); err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, s.Seq)
		}
	}
	if len(seqs) < 3 || !(seqs[0] < seqs[1] && seqs[1] < seqs[2]) {
		t.Fatalf("snapshots %v: want three, in order", seqs)
	}
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
}
