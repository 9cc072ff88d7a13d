package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/worker"
)

// Prober asks one task for its status and scrapes its metrics. Both block
// until they have an answer or ctx ends.
type Prober interface {
	Status(ctx context.Context, addr string) (*pb.GetStatusResponse, error)
	// Metrics returns the metric families of the Prometheus text at url.
	Metrics(ctx context.Context, url string) (map[string]*dto.MetricFamily, error)
}

// RPCProber asks tasks over the repository's gRPC transport with the
// cluster's rpc.Options, and scrapes /metrics over HTTP. It keeps one
// connection per address; Close closes them.
type RPCProber struct {
	opts   rpc.Options
	client *http.Client
	mu     sync.Mutex
	conns  map[string]rpcConn
}

type rpcConn struct {
	w      worker.Service
	closer io.Closer
}

// NewRPCProber returns a Prober that dials tasks with opts (a task's, or a
// tool's: pki.Security.ClientOptions).
func NewRPCProber(opts rpc.Options) *RPCProber {
	return &RPCProber{opts: opts, conns: map[string]rpcConn{},
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}}}
}

// Status calls the task's GetStatus.
func (p *RPCProber) Status(ctx context.Context, addr string) (*pb.GetStatusResponse, error) {
	p.mu.Lock()
	c, ok := p.conns[addr]
	if !ok {
		w, closer, err := rpc.DialWorker(addr, p.opts)
		if err != nil {
			p.mu.Unlock()
			return nil, err
		}
		c = rpcConn{w, closer}
		p.conns[addr] = c
	}
	p.mu.Unlock()
	return c.w.GetStatus(ctx, &pb.GetStatusRequest{})
}

// Metrics scrapes url.
func (p *RPCProber) Metrics(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	// Protocol buffers when the task offers them: cheaper to write and to
	// read than the text format (the text format otherwise).
	req.Header.Set("Accept", string(expfmt.FmtProtoDelim)+";q=0.7,text/plain;version=0.0.4;q=0.3")
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("dashboard: GET %s: %s", url, resp.Status)
	}
	body := &boundedReader{r: resp.Body, left: maxScrapeBytes, url: url}
	format := expfmt.ResponseFormat(resp.Header)
	if format.FormatType() != expfmt.TypeProtoDelim {
		return ParseMetrics(body)
	}
	fams := map[string]*dto.MetricFamily{}
	dec := expfmt.NewDecoder(body, format)
	for {
		f := &dto.MetricFamily{}
		if err := dec.Decode(f); err == io.EOF {
			return fams, nil
		} else if err != nil {
			return nil, fmt.Errorf("dashboard: reading the metrics at %s: %w", url, err)
		}
		fams[f.GetName()] = f
	}
}

// Close closes the connections.
func (p *RPCProber) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for a, c := range p.conns {
		c.closer.Close()
		delete(p.conns, a)
	}
	p.client.CloseIdleConnections()
	return nil
}

// ParseMetrics parses Prometheus text exposition format with Prometheus'
// own parser.
func ParseMetrics(r io.Reader) (map[string]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("dashboard: parsing metrics: %w", err)
	}
	return fams, nil
}

// The states of a task.
const (
	StateStarting  = "starting"  // not answered yet
	StateRunning   = "running"   // answers
	StateStraggler = "straggler" // answers, but steps much slower than the others
	StateLost      = "lost"      // has not answered within the heartbeat deadline
	StateDone      = "done"      // stopped answering after training finished
)

// TaskStatus is one task as /api/cluster and the page show it.
type TaskStatus struct {
	Job     string `json:"job"`
	Index   int    `json:"index"`
	Name    string `json:"name"`
	Address string `json:"address"`
	State   string `json:"state"`
	// GlobalStep is the task's distflow_global_step (-1: unknown).
	GlobalStep int64 `json:"global_step"`
	// HeartbeatAge is the time since the task last answered, in seconds
	// (since the dashboard began watching it when it never answered).
	HeartbeatAge float64 `json:"heartbeat_age"`
	// MetricsURL is the task's /metrics ("" until the task names it).
	MetricsURL string `json:"metrics_url"`
	// StepRate is this task's steps per second over the last poll.
	StepRate          float64  `json:"step_rate"`
	ExamplesPerSecond float64  `json:"examples_per_second"`
	StepSeconds       float64  `json:"step_seconds"` // mean step time over the last poll
	Loss              *float64 `json:"loss,omitempty"`
	CPU               float64  `json:"cpu"`          // cores used over the last poll
	MemoryBytes       float64  `json:"memory_bytes"` // resident
	Variables         int      `json:"variables"`
	VariableBytes     int64    `json:"variable_bytes"`
	Restarts          int      `json:"restarts"`
	Error             string   `json:"error,omitempty"`
	// Devices are the task's accelerators, ordered by name, from its
	// last scrape; none for a task that computes on its CPU only (or has
	// not been scraped yet).
	Devices []DeviceMemory `json:"devices,omitempty"`
}

// DeviceMemory is one accelerator of a task and the memory of its
// allocator, from metrics.DeviceMemoryBytes.
type DeviceMemory struct {
	Name     string `json:"name"`     // the task's local name: "GPU:0"
	Platform string `json:"platform"` // "cuda" or "sim"
	// Card is the card it lives on, Logical its ordinal among the
	// machine's (logical) GPUs: tasks sharing a machine each name their
	// first "GPU:0".
	Card    int   `json:"card"`
	Logical int   `json:"logical_gpu"`
	InUse   int64 `json:"in_use_bytes"`
	Peak    int64 `json:"peak_bytes"`
	Limit   int64 `json:"limit_bytes"` // what the allocator may hold
}

// taskState is what the dashboard knows of a task; guarded by the
// Dashboard's mutex.
type taskState struct {
	Task
	added       time.Time
	lastOK      time.Time
	answered    bool
	incarnation uint64
	metricsAddr string
	status      TaskStatus
	// prev holds the last scrape's counters, to turn them into rates.
	prev     counters
	havePrev bool
	window   []counters // the last rateWindow scrapes, oldest first
	lastErr  string
	lastEval map[string]float64 // distflow_eval_metric by name
	fresh    bool               // answered in the last poll
}

// counters are the cumulative values read from one scrape.
type counters struct {
	at          time.Time
	steps       float64 // distflow_step_seconds count
	stepSum     float64 // its sum
	examples    float64
	cpu         float64
	checkpoints float64
	stale       float64
}

// rateWindow is how many scrapes the rates span.
const rateWindow = 5

// probe is one task's answers in a poll.
type probe struct {
	st      *pb.GetStatusResponse
	err     error
	fams    map[string]*dto.MetricFamily
	mErr    error
	metrics string
}

// Poll asks every task once, concurrently, and publishes a snapshot.
func (d *Dashboard) Poll(ctx context.Context) {
	d.mu.Lock()
	tasks := append([]*taskState(nil), d.tasks...)
	addrs := make([]string, len(tasks))
	murls := make([]string, len(tasks))
	for i, t := range tasks {
		addrs[i], murls[i] = t.Address, metricsURL(t.metricsAddr)
	}
	d.mu.Unlock()

	timeout := min(d.cfg.Interval, d.cfg.LostAfter)
	probes := make([]probe, len(tasks))
	var wg sync.WaitGroup
	for i := range tasks {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			p := &probes[i]
			p.st, p.err = d.cfg.Prober.Status(pctx, addrs[i])
			if p.err == nil {
				p.metrics = metricsAddress(p.st)
				if u := metricsURL(p.metrics); u != "" {
					p.fams, p.mErr = d.cfg.Prober.Metrics(pctx, u)
				}
			} else if murls[i] != "" {
				// A task busy with a long RPC may still answer its
				// metrics; they keep its step counts moving.
				p.fams, p.mErr = d.cfg.Prober.Metrics(pctx, murls[i])
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, t := range tasks {
		if d.byName[t.name()] != t {
			continue // the cluster changed meanwhile
		}
		d.updateLocked(now, t, probes[i])
	}
	d.markStragglersLocked(now)
	d.recordLocked(now)
}

// metricsAddress is the GetStatusResponse field metrics_address, read
// through an interface so that this package builds against protos with or
// without it.
func metricsAddress(st *pb.GetStatusResponse) string {
	if m, ok := any(st).(interface{ GetMetricsAddress() string }); ok {
		return m.GetMetricsAddress()
	}
	return ""
}

func metricsURL(addr string) string {
	if addr == "" {
		return ""
	}
	return "http://" + addr + "/metrics"
}

// updateLocked folds one task's answers into its state and the events.
func (d *Dashboard) updateLocked(now time.Time, t *taskState, p probe) {
	s := &t.status
	s.Job, s.Index, s.Name, s.Address = t.Job, t.Index, t.name(), t.Address
	if !t.answered {
		s.GlobalStep = -1
	}
	prevState := s.State
	if p.err == nil {
		if !t.answered {
			d.addEventLocked(now, t.name(), "started", "answers at "+t.Address)
		} else if t.incarnation != p.st.GetIncarnation() {
			s.Restarts++
			t.havePrev = false
			d.addEventLocked(now, t.name(), "restarted", "restarted: a new process, whose graphs and variables start afresh")
		} else if prevState == StateLost {
			d.addEventLocked(now, t.name(), "recovered", fmt.Sprintf("answers again after %.1f s", now.Sub(t.lastOK).Seconds()))
		}
		t.answered, t.lastOK, t.incarnation = true, now, p.st.GetIncarnation()
		t.metricsAddr = p.metrics
		s.MetricsURL = metricsURL(p.metrics)
		s.Variables, s.VariableBytes = len(p.st.GetVariables()), 0
		for _, v := range p.st.GetVariables() {
			s.VariableBytes += v.GetBytes()
		}
		s.Error, t.lastErr = "", ""
	} else {
		t.lastErr = p.err.Error()
	}
	if p.fams != nil {
		d.readMetricsLocked(now, t, p.fams)
		if p.err != nil && t.answered {
			// Its metrics answer: busy, not lost.
			t.lastOK = now
			p.err = nil
		}
	} else if p.mErr != nil && p.err == nil {
		s.Error = "metrics: " + p.mErr.Error()
	}
	if p.err == nil && prevState != StateStraggler {
		// markStragglersLocked decides whether a straggler still is.
		s.State = StateRunning
	}
	t.fresh = p.err == nil
	since := t.lastOK
	if !t.answered {
		since = t.added
	}
	s.HeartbeatAge = now.Sub(since).Seconds()
	if p.err != nil {
		switch {
		case d.finished && t.answered && prevState != StateLost:
			s.State = StateDone // lost before the end stays lost
		case now.Sub(since) > d.cfg.LostAfter:
			s.State = StateLost
			s.Error = t.lastErr
			s.StepRate, s.ExamplesPerSecond, s.CPU = 0, 0, 0
		case !t.answered:
			s.State = StateStarting
		}
	}
	if s.State != prevState {
		switch s.State {
		case StateLost:
			d.addEventLocked(now, t.name(), "lost", fmt.Sprintf("no answer for %.1f s (deadline %v): %s", s.HeartbeatAge, d.cfg.LostAfter, t.lastErr))
		case StateDone:
			d.addEventLocked(now, t.name(), "done", "exited after training")
		}
	}
}

// readMetricsLocked reads the contract's metrics (see package metrics)
// into the task's status, and turns counters into rates and events.
func (d *Dashboard) readMetricsLocked(now time.Time, t *taskState, fams map[string]*dto.MetricFamily) {
	s := &t.status
	if v, ok := gauge(fams, "distflow_global_step"); ok {
		s.GlobalStep = int64(v)
	}
	c := counters{at: now}
	c.steps, c.stepSum = histogram(fams, "distflow_step_seconds")
	if v, ok := gauge(fams, "distflow_loss"); ok && !math.IsNaN(v) && c.steps > 0 {
		s.Loss = &v // (0 until the first step)
	}
	if v, ok := gauge(fams, "process_resident_memory_bytes"); ok {
		s.MemoryBytes = v
	}
	c.examples, _ = counter(fams, "distflow_examples_total")
	c.cpu, _ = counter(fams, "process_cpu_seconds_total")
	c.checkpoints, _ = counter(fams, "distflow_checkpoints_saved_total")
	c.stale, _ = counter(fams, "distflow_stale_gradients_dropped_total")
	if t.havePrev {
		p := t.prev
		// Rates over the last few polls: one poll of a busy machine is
		// noise, and would make stragglers of healthy tasks.
		w := t.window[0]
		if dt := c.at.Sub(w.at).Seconds(); dt > 0 {
			s.StepRate = max(0, c.steps-w.steps) / dt
			s.ExamplesPerSecond = max(0, c.examples-w.examples) / dt
			s.CPU = max(0, c.cpu-w.cpu) / dt
		}
		if n := c.steps - p.steps; n > 0 {
			s.StepSeconds = (c.stepSum - p.stepSum) / n
		}
		if n := c.checkpoints - p.checkpoints; n > 0 {
			d.addEventLocked(now, t.name(), "checkpoint", fmt.Sprintf("saved a checkpoint at global step %d", s.GlobalStep))
		}
		if n := c.stale - p.stale; n > 0 {
			d.addEventLocked(now, t.name(), "stale", fmt.Sprintf("dropped %.0f stale gradient(s)", n))
		}
	}
	if !t.havePrev {
		t.window = t.window[:0]
	}
	t.window = append(t.window, c)
	if len(t.window) > rateWindow {
		t.window = t.window[1:]
	}
	t.prev, t.havePrev = c, true
	t.lastEval = evalMetrics(fams)
	// A new slice each scrape: snapshots share it, and /api/cluster
	// encodes one after the lock is released.
	s.Devices = deviceMemory(fams)
}

// DevicesFromMetrics is the accelerators of a task and their memory, from
// its parsed metrics (ParseMetrics): nil for a task without any.
func DevicesFromMetrics(fams map[string]*dto.MetricFamily) []DeviceMemory {
	return deviceMemory(fams)
}

// deviceMemory reads distflow_device_memory_bytes{device,platform,card,logical_gpu,kind}
// (see package metrics), one DeviceMemory per device label, in device
// order; nil when the task exports none, as a task without accelerators
// does.
func deviceMemory(fams map[string]*dto.MetricFamily) []DeviceMemory {
	f := fams["distflow_device_memory_bytes"]
	if f == nil {
		return nil
	}
	var out []DeviceMemory
	at := map[string]int{} // index in out by device name
	for _, m := range f.GetMetric() {
		var name, platform, kind string
		var card, logical int
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "device":
				name = l.GetValue()
			case "platform":
				platform = l.GetValue()
			case "card":
				card, _ = strconv.Atoi(l.GetValue())
			case "logical_gpu":
				logical, _ = strconv.Atoi(l.GetValue())
			case "kind":
				kind = l.GetValue()
			}
		}
		if name == "" {
			continue
		}
		i, ok := at[name]
		if !ok {
			i = len(out)
			at[name] = i
			out = append(out, DeviceMemory{Name: name, Platform: platform, Card: card, Logical: logical})
		}
		v := int64(m.GetGauge().GetValue() + m.GetUntyped().GetValue())
		switch kind {
		case "in_use":
			out[i].InUse = v
		case "peak":
			out[i].Peak = v
		case "limit":
			out[i].Limit = v
		}
	}
	// The task writes its devices in map order; the page wants them
	// stable, and GPU:10 after GPU:9.
	sort.Slice(out, func(a, b int) bool { return deviceLess(out[a].Name, out[b].Name) })
	return out
}

// deviceLess orders local device names ("GPU:2") by type, then ordinal.
func deviceLess(a, b string) bool {
	ta, na := splitDevice(a)
	tb, nb := splitDevice(b)
	if ta != tb {
		return ta < tb
	}
	if na != nb {
		return na < nb
	}
	return a < b
}

func splitDevice(name string) (typ string, ordinal int) {
	i := strings.LastIndexByte(name, ':')
	if i < 0 {
		return name, -1
	}
	n, err := strconv.Atoi(name[i+1:])
	if err != nil {
		return name, -1
	}
	return name[:i], n
}

// evalMetrics returns distflow_eval_metric by its name label.
func evalMetrics(fams map[string]*dto.MetricFamily) map[string]float64 {
	f := fams["distflow_eval_metric"]
	if f == nil {
		return nil
	}
	out := map[string]float64{}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "name" {
				out[l.GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// gauge sums a gauge's series (one per task, as the contract has it).
func gauge(fams map[string]*dto.MetricFamily, name string) (float64, bool) {
	f := fams[name]
	if f == nil || len(f.GetMetric()) == 0 {
		return 0, false
	}
	var v float64
	for _, m := range f.GetMetric() {
		switch {
		case m.Gauge != nil:
			v += m.GetGauge().GetValue()
		case m.Untyped != nil:
			v += m.GetUntyped().GetValue()
		case m.Counter != nil:
			v += m.GetCounter().GetValue()
		}
	}
	return v, true
}

func counter(fams map[string]*dto.MetricFamily, name string) (float64, bool) {
	return gauge(fams, name)
}

// histogram sums a histogram's counts and sums over its series.
func histogram(fams map[string]*dto.MetricFamily, name string) (count, sum float64) {
	f := fams[name]
	if f == nil {
		return 0, 0
	}
	for _, m := range f.GetMetric() {
		if h := m.GetHistogram(); h != nil {
			count += float64(h.GetSampleCount())
			sum += h.GetSampleSum()
		}
	}
	return count, sum
}

// markStragglersLocked marks the running training tasks that step at less
// than StragglerRatio of the median rate.
func (d *Dashboard) markStragglersLocked(now time.Time) {
	var rates []float64
	for _, t := range d.tasks {
		if training(t.Job) && t.fresh && len(t.window) == rateWindow && isUp(t.status.State) && t.status.StepRate > 0 {
			rates = append(rates, t.status.StepRate)
		}
	}
	if len(rates) < 2 {
		return
	}
	sort.Float64s(rates)
	n := len(rates)
	median := (rates[(n-1)/2] + rates[n/2]) / 2
	for _, t := range d.tasks {
		s := &t.status
		if !training(t.Job) || !t.fresh || len(t.window) < rateWindow || !isUp(s.State) {
			continue // judged on a full window: the first polls are noise (start-up, warm-up)
		}
		slow := s.StepRate < d.cfg.StragglerRatio*median
		switch {
		case slow && s.State == StateRunning:
			s.State = StateStraggler
			d.addEventLocked(now, t.name(), "straggler", fmt.Sprintf("steps at %.1f/s, the median is %.1f/s", s.StepRate, median))
		case !slow && s.State == StateStraggler:
			s.State = StateRunning
		}
	}
}

func training(job string) bool { return job == "worker" || job == "chief" }

func isUp(state string) bool { return state == StateRunning || state == StateStraggler }

// Point is one poll of the whole cluster, for the curves.
type Point struct {
	Time float64 `json:"t"` // Unix seconds
	// GlobalStep is the largest global step any task reports (-1: none).
	GlobalStep int64 `json:"step"`
	// Loss is the mean loss of the training tasks that report one.
	Loss *float64 `json:"loss"`
	// Accuracy is distflow_eval_metric{name="accuracy"}, when a task
	// reports it.
	Accuracy          *float64 `json:"accuracy"`
	ExamplesPerSecond float64  `json:"examples_per_second"`
	// StepSeconds is each training task's mean step time, by task name
	// (null: no step in this poll).
	StepSeconds map[string]*float64 `json:"step_seconds"`
}

func (d *Dashboard) recordLocked(now time.Time) {
	p := Point{Time: float64(now.UnixMilli()) / 1000, GlobalStep: -1, StepSeconds: map[string]*float64{}}
	var loss float64
	var nLoss int
	for _, t := range d.tasks {
		s := t.status
		p.GlobalStep = max(p.GlobalStep, s.GlobalStep)
		if !training(t.Job) {
			continue
		}
		if isUp(s.State) && s.Loss != nil {
			loss += *s.Loss
			nLoss++
		}
		if isUp(s.State) {
			p.ExamplesPerSecond += s.ExamplesPerSecond
		}
		if isUp(s.State) && s.StepSeconds > 0 && s.StepRate > 0 {
			v := s.StepSeconds
			p.StepSeconds[s.Name] = &v
		} else {
			p.StepSeconds[s.Name] = nil
		}
		if a, ok := t.lastEval["accuracy"]; ok {
			p.Accuracy = &a
		}
	}
	if nLoss > 0 {
		l := loss / float64(nLoss)
		p.Loss = &l
	}
	d.history = append(d.history, p)
	if over := len(d.history) - d.cfg.History; over > 0 {
		d.history = append(d.history[:0], d.history[over:]...)
	}
	d.seq++
	b, err := json.Marshal(d.snapshotLocked(now, true))
	if err != nil {
		d.cfg.Logger.Error("dashboard: encoding a snapshot", "err", err)
		return
	}
	d.publishLocked(b)
}

// Event is something that happened to the run.
type Event struct {
	Time float64 `json:"t"`
	Seq  int     `json:"seq"`
	Task string  `json:"task,omitempty"`
	// Kind is one of started, lost, recovered, restarted, straggler,
	// checkpoint, stale, done, finished.
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

func (d *Dashboard) addEventLocked(now time.Time, task, kind, msg string) {
	seq := 1
	if n := len(d.events); n > 0 {
		seq = d.events[n-1].Seq + 1
	}
	d.events = append(d.events, Event{Time: float64(now.UnixMilli()) / 1000, Seq: seq, Task: task, Kind: kind, Message: msg})
	if over := len(d.events) - maxEvents; over > 0 {
		d.events = append(d.events[:0], d.events[over:]...)
	}
	if kind != "started" && kind != "checkpoint" {
		d.cfg.Logger.Info("dashboard: "+kind, "task", task, "detail", msg)
	}
}

// Snapshot is what the page receives on every poll.
type Snapshot struct {
	Title    string       `json:"title"`
	Seq      uint64       `json:"seq"`
	Time     float64      `json:"t"`
	Uptime   float64      `json:"uptime"`
	Finished bool         `json:"finished"`
	Tasks    []TaskStatus `json:"tasks"`
	// Point is the newest point of the curves; History, all of them (only
	// in /api/history).
	Point   *Point  `json:"point,omitempty"`
	History []Point `json:"history,omitempty"`
	// Events are the last events (every kept one in /api/history).
	Events       []Event    `json:"events"`
	GraphVersion int        `json:"graph_nodes"`
	Trace        *TraceInfo `json:"trace,omitempty"`
	LostAfter    float64    `json:"lost_after"`
}

func (d *Dashboard) snapshotLocked(now time.Time, live bool) Snapshot {
	s := Snapshot{Title: d.cfg.Title, Seq: d.seq, Time: float64(now.UnixMilli()) / 1000,
		Uptime: now.Sub(d.start).Seconds(), Finished: d.finished, Tasks: make([]TaskStatus, 0, len(d.tasks)),
		LostAfter: d.cfg.LostAfter.Seconds()}
	for _, t := range d.tasks {
		ts := t.status
		ts.Job, ts.Index, ts.Name, ts.Address = t.Job, t.Index, t.name(), t.Address
		if ts.State == "" {
			ts.State, ts.GlobalStep = StateStarting, -1
		}
		s.Tasks = append(s.Tasks, ts)
	}
	if live {
		if n := len(d.history); n > 0 {
			p := d.history[n-1]
			s.Point = &p
		}
		s.Events = d.events[max(0, len(d.events)-50):]
	} else {
		s.History = d.history
		s.Events = d.events
	}
	if d.graph != nil {
		s.GraphVersion = len(d.graph.Nodes)
	}
	s.Trace = latestTrace(d.cfg.TraceDir)
	return s
}

// maxScrapeBytes bounds what the dashboard reads of one task's /metrics
// (a task serves tens of KiB): a peer that streams without end is cut
// off with an error, not read into memory.
const maxScrapeBytes = 16 << 20

// boundedReader fails once more than left bytes have been read.
type boundedReader struct {
	r    io.Reader
	left int64
	url  string
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, fmt.Errorf("dashboard: the metrics at %s are over %d MiB: not read further", b.url, maxScrapeBytes>>20)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}
