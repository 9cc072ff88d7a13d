package dashboard

import (
	"crypto/subtle"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"sort"
)

//go:embed static
var static embed.FS

// Handler serves the page and its API:
//
//	GET  /                  the page (its JavaScript and CSS are embedded)
//	GET  /api/cluster       {"tasks": [TaskStatus...]}: one entry per task
//	GET  /api/history       a Snapshot with every point of the curves and every event
//	GET  /api/events        server-sent events: a Snapshot ("snapshot") after every poll
//	GET  /api/graph         the Graph (404 until the caller sets one)
//	GET  /trace/latest.json the newest step trace in Config.TraceDir
//	POST /api/report        a Report, with "Authorization: Bearer <Config.ReportToken>"
func (d *Dashboard) Handler() http.Handler {
	mux := http.NewServeMux()
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded directory exists
	}
	files := http.FileServerFS(sub)
	mux.Handle("GET /static/", http.StripPrefix("/static/", files))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, sub, "index.html")
	})
	mux.HandleFunc("GET /api/cluster", d.serveCluster)
	mux.HandleFunc("GET /api/history", d.serveHistory)
	mux.HandleFunc("GET /api/events", d.serveEvents)
	mux.HandleFunc("GET /api/graph", d.serveGraph)
	mux.HandleFunc("GET /trace/latest.json", d.serveTrace)
	mux.HandleFunc("POST /api/report", d.serveReport)
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		// The client went away; nothing to tell it.
		return
	}
}

func (d *Dashboard) serveCluster(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	s := d.snapshotLocked(d.now(), true)
	d.mu.Unlock()
	writeJSON(w, struct {
		Tasks []TaskStatus `json:"tasks"`
	}{s.Tasks})
}

func (d *Dashboard) serveHistory(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	s := d.snapshotLocked(d.now(), false)
	d.mu.Unlock()
	writeJSON(w, s)
}

func (d *Dashboard) serveGraph(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	g := d.graph
	d.mu.Unlock()
	if g == nil {
		http.Error(w, "dashboard: no graph yet (the chief reports it once its session is made)", http.StatusNotFound)
		return
	}
	writeJSON(w, g)
}

func (d *Dashboard) serveTrace(w http.ResponseWriter, r *http.Request) {
	p := tracePath(d.cfg.TraceDir)
	if p == "" {
		http.Error(w, "dashboard: no step trace yet (record one with --trace-steps N)", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	http.ServeFile(w, r, p)
}

// serveEvents streams a snapshot after every poll until the client goes
// away or the dashboard stops.
func (d *Dashboard) serveEvents(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "dashboard: streaming unsupported", http.StatusInternalServerError)
		return
	}
	ch, last := d.subscribe()
	defer d.unsubscribe(ch)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "retry: 1000\n\n")
	send := func(b []byte) bool {
		if _, err := fmt.Fprintf(w, "event: snapshot\ndata: %s\n\n", b); err != nil {
			return false
		}
		fl.Flush()
		return true
	}
	if last != nil && !send(last) {
		return
	}
	fl.Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case b, ok := <-ch:
			if !ok || !send(b) {
				return
			}
		}
	}
}

// Report is what a task tells the dashboard of another process (the chief
// of a local cluster tells the launcher's): the cluster, the graph, the
// end of training. Fields left empty change nothing.
type Report struct {
	// Cluster maps each job to its tasks' addresses, in task order, as
	// TF_CONFIG's "cluster" does.
	Cluster  map[string][]string `json:"cluster,omitempty"`
	Graph    *Graph              `json:"graph,omitempty"`
	Finished bool                `json:"finished,omitempty"`
}

// Apply applies a report to the dashboard.
func (d *Dashboard) Apply(rep Report) error {
	if len(rep.Cluster) > 0 {
		if err := d.SetCluster(TasksOf(rep.Cluster)); err != nil {
			return err
		}
	}
	if rep.Graph != nil {
		d.SetGraph(rep.Graph)
	}
	if rep.Finished {
		d.Finished()
	}
	return nil
}

// TasksOf lists the tasks of a cluster given as TF_CONFIG's "cluster".
func TasksOf(c map[string][]string) []Task {
	jobs := make([]string, 0, len(c))
	for j := range c {
		jobs = append(jobs, j)
	}
	sort.Strings(jobs)
	var out []Task
	for _, j := range jobs {
		for i, a := range c[j] {
			out = append(out, Task{Job: j, Index: i, Address: a})
		}
	}
	return out
}

func (d *Dashboard) serveReport(w http.ResponseWriter, r *http.Request) {
	want := "Bearer " + d.cfg.ReportToken
	if d.cfg.ReportToken == "" || subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte(want)) != 1 {
		http.Error(w, "dashboard: /api/report needs the dashboard's report token", http.StatusForbidden)
		return
	}
	var rep Report
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxReportBodySize))
	if err := dec.Decode(&rep); err != nil {
		http.Error(w, "dashboard: bad report: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := d.Apply(rep); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
