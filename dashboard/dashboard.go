package dashboard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"
)

// The defaults of the Config fields left zero.
const (
	DefaultInterval   = time.Second
	DefaultLostAfter  = 5 * time.Second
	DefaultHistory    = 900
	DefaultStraggler  = 0.5
	maxEvents         = 500
	maxReportBodySize = 32 << 20
)

// Task names one task of the cluster and where it serves gRPC.
type Task struct {
	Job     string `json:"job"`
	Index   int    `json:"index"`
	Address string `json:"address"`
}

func (t Task) name() string { return fmt.Sprintf("/job:%s/task:%d", t.Job, t.Index) }

// Config says what a Dashboard watches and how. Only Prober is required
// (NewRPCProber makes the usual one); the cluster may be given later with
// SetCluster.
type Config struct {
	// Tasks is the cluster, if known when the dashboard starts.
	Tasks []Task
	// Prober asks the tasks for their status and metrics.
	Prober Prober
	// Interval is the time between two polls of every task; 0 means
	// DefaultInterval.
	Interval time.Duration
	// LostAfter is the heartbeat deadline: a task that has not answered
	// for this long is lost; 0 means DefaultLostAfter.
	LostAfter time.Duration
	// History is how many polls the curves keep; 0 means DefaultHistory.
	History int
	// StragglerRatio marks a training task whose step rate is below this
	// fraction of the median rate as a straggler; 0 means DefaultStraggler.
	StragglerRatio float64
	// TraceDir holds the step traces (Chrome trace JSON, *.json); the page
	// shows the newest. Empty: no traces.
	TraceDir string
	// ReportToken, when set, lets a task POST to /api/report with the
	// header "Authorization: Bearer <token>" (the chief of a local cluster
	// reports its cluster and graph to the launcher's dashboard this way).
	// Empty: /api/report is refused.
	ReportToken string
	// Title names the run on the page.
	Title string
	// Logger receives what goes wrong; nil means slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	switch {
	case c.Prober == nil:
		return c, errors.New("dashboard: Config.Prober is nil: use NewRPCProber with the cluster's rpc.Options")
	case c.Interval < 0, c.LostAfter < 0, c.History < 0, c.StragglerRatio < 0:
		return c, fmt.Errorf("dashboard: Config has a negative Interval (%v), LostAfter (%v), History (%d) or StragglerRatio (%v)",
			c.Interval, c.LostAfter, c.History, c.StragglerRatio)
	}
	c.Interval = cmp.Or(c.Interval, DefaultInterval)
	c.LostAfter = cmp.Or(c.LostAfter, DefaultLostAfter)
	c.History = cmp.Or(c.History, DefaultHistory)
	c.StragglerRatio = cmp.Or(c.StragglerRatio, DefaultStraggler)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Title == "" {
		c.Title = "distflow"
	}
	return c, nil
}

// Dashboard watches a cluster and serves the page and its API. It is safe
// for concurrent use. Make one with New, start its polling with Run, and
// serve Handler.
type Dashboard struct {
	cfg   Config
	start time.Time
	now   func() time.Time // time.Now; tests move a clock

	mu       sync.Mutex
	tasks    []*taskState // sorted by job, index
	byName   map[string]*taskState
	history  []Point
	events   []Event
	graph    *Graph
	finished bool
	seq      uint64 // snapshots made
	subs     map[chan []byte]struct{}
	last     []byte // the last snapshot, JSON
}

// New makes a dashboard for cfg. It polls nothing until Run.
func New(cfg Config) (*Dashboard, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	d := &Dashboard{cfg: cfg, start: time.Now(), now: time.Now, byName: map[string]*taskState{}, subs: map[chan []byte]struct{}{}}
	if err := d.SetCluster(cfg.Tasks); err != nil {
		return nil, err
	}
	return d, nil
}

// SetCluster sets the tasks to watch. Tasks already known keep their
// state; a task whose address changed starts afresh.
func (d *Dashboard) SetCluster(tasks []Task) error {
	seen := map[string]bool{}
	for _, t := range tasks {
		if t.Job == "" || t.Index < 0 || t.Address == "" {
			return fmt.Errorf("dashboard: task %+v: want a job, an index >= 0 and an address", t)
		}
		if seen[t.name()] {
			return fmt.Errorf("dashboard: task %s given twice", t.name())
		}
		seen[t.name()] = true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	byName := map[string]*taskState{}
	var list []*taskState
	for _, t := range tasks {
		ts := d.byName[t.name()]
		if ts == nil || ts.Address != t.Address {
			ts = &taskState{Task: t, added: now}
		}
		byName[t.name()] = ts
		list = append(list, ts)
	}
	sort.Slice(list, func(i, j int) bool {
		a, b := list[i], list[j]
		if a.Job != b.Job {
			return jobRank(a.Job) < jobRank(b.Job)
		}
		return a.Index < b.Index
	})
	d.tasks, d.byName = list, byName
	return nil
}

// jobRank orders the jobs as a person reads a cluster: who leads first.
func jobRank(job string) string {
	switch job {
	case "chief":
		return "0"
	case "worker":
		return "1"
	case "ps":
		return "2"
	case "evaluator":
		return "3"
	}
	return "4" + job
}

// SetGraph sets the model graph and its placement that the page shows.
func (d *Dashboard) SetGraph(g *Graph) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.graph = g
}

// Finished tells the dashboard that training is over: the tasks that stop
// answering from now on are done, not lost.
func (d *Dashboard) Finished() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.finished {
		d.finished = true
		d.addEventLocked(d.now(), "", "finished", "training finished")
	}
}

// Run polls every task each Interval until ctx ends, and returns ctx's
// error.
func (d *Dashboard) Run(ctx context.Context) error {
	t := time.NewTicker(d.cfg.Interval)
	defer t.Stop()
	for {
		d.Poll(ctx)
		select {
		case <-ctx.Done():
			d.closeSubs()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Serve serves the dashboard on lis until ctx ends, polling the cluster
// meanwhile. It returns nil once ctx has ended.
func (d *Dashboard) Serve(ctx context.Context, lis net.Listener) error {
	srv := &http.Server{Handler: d.Handler(), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = d.Run(ctx)
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	err := srv.Serve(lis)
	<-done
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("dashboard: serving on %s: %w", lis.Addr(), err)
}

// subscribe returns a channel that receives every new snapshot, and the
// last one to start with (nil before the first poll).
func (d *Dashboard) subscribe() (chan []byte, []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ch := make(chan []byte, 4)
	d.subs[ch] = struct{}{}
	return ch, d.last
}

func (d *Dashboard) unsubscribe(ch chan []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.subs[ch]; ok {
		delete(d.subs, ch)
		close(ch)
	}
}

func (d *Dashboard) closeSubs() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for ch := range d.subs {
		delete(d.subs, ch)
		close(ch)
	}
}

// publishLocked sends a snapshot to every subscriber; a slow one misses
// it rather than slowing the others (the next snapshot is complete).
func (d *Dashboard) publishLocked(b []byte) {
	d.last = b
	for ch := range d.subs {
		select {
		case ch <- b:
		default:
		}
	}
}
