package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/dashboard"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/localcluster"
	"github.com/distflow/distflow/pki"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/train"
)

// The launcher of a local cluster serves the dashboard and tells its chief
// where to report the cluster and the graph (the launcher has neither).
const (
	envDashboardReport = "DISTFLOW_DASHBOARD_REPORT" // the launcher's /api/report URL
	envDashboardToken  = "DISTFLOW_DASHBOARD_TOKEN"  // its bearer token, made per run
)

// dashboardFlags are the options of the live dashboard of distflow train.
type dashboardFlags struct {
	addr string // --dashboard: where to serve it ("" none)
}

func addDashboardFlags(fl *pflag.FlagSet, d *dashboardFlags) {
	fl.StringVar(&d.addr, "dashboard", "", `serve a live web dashboard of the run on this address, e.g. "127.0.0.1:8080", or ":8080" for other machines `+
		"(it has no login: anyone who reaches it sees the cluster); by the launcher with --local-cluster, else by the chief; its URL is printed at start")
}

// traceDir is where the dashboard looks for the newest step trace: the
// directory of --trace-file, else --logdir (trace-<step>.json).
func (f trainFlags) traceDir() string {
	if f.trace.file != "" {
		return filepath.Dir(f.trace.file)
	}
	return f.logdir
}

// serveDashboard listens on addr, prints the dashboard's URL and serves d
// until stop is called.
func serveDashboard(ctx context.Context, d *dashboard.Dashboard, addr string, stderr io.Writer) (stop func(), at *net.TCPAddr, err error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("--dashboard %s: %w (choose another address, e.g. 127.0.0.1:0 for a free port)", addr, err)
	}
	fmt.Fprintf(stderr, "dashboard: %s\n", dashboardURL(lis.Addr().(*net.TCPAddr)))
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := d.Serve(ctx, lis); err != nil {
			fmt.Fprintf(stderr, "dashboard: %v\n", err)
		}
	}()
	return func() { cancel(); <-done }, lis.Addr().(*net.TCPAddr), nil
}

// dashboardURL is the URL a person opens: a wildcard address is shown as
// this host's name.
func dashboardURL(a *net.TCPAddr) string {
	host := a.IP.String()
	if a.IP.IsUnspecified() {
		host = "localhost"
		if h, err := os.Hostname(); err == nil && h != "" {
			host = h
		}
	}
	return "http://" + net.JoinHostPort(host, fmt.Sprint(a.Port)) + "/"
}

// launch serves the dashboard of a local cluster in its launcher. sec is
// the cluster's security (with the ephemeral certificates, when the
// launcher made them). It returns the environment that tells the chief
// where to report, and what stops the dashboard.
func (d dashboardFlags) launch(ctx context.Context, f trainFlags, sec pki.Security, stderr io.Writer) (env []string, stop func(), err error) {
	if d.addr == "" {
		return nil, func() {}, nil
	}
	opts, err := sec.ClientOptions()
	if err != nil {
		return nil, nil, fmt.Errorf("--dashboard: %w", err)
	}
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return nil, nil, err
	}
	prober := dashboard.NewRPCProber(opts)
	db, err := dashboard.New(dashboard.Config{Prober: prober, TraceDir: f.traceDir(), ReportToken: hex.EncodeToString(tok),
		Title: fmt.Sprintf("%s on %s", f.model, f.localCluster), Logger: f.logger(stderr)})
	if err != nil {
		return nil, nil, err
	}
	stopServe, at, err := serveDashboard(ctx, db, d.addr, stderr)
	if err != nil {
		prober.Close()
		return nil, nil, err
	}
	// The chief, on this machine, reports on loopback unless the
	// dashboard listens on one address only.
	host := at.IP.String()
	if at.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	report := "http://" + net.JoinHostPort(host, fmt.Sprint(at.Port)) + "/api/report"
	return []string{envDashboardReport + "=" + report, envDashboardToken + "=" + hex.EncodeToString(tok)},
		func() { stopServe(); prober.Close() }, nil
}

// taskHooks returns this task's part in the dashboard: the chief of a
// local cluster reports to its launcher's dashboard; a chief given
// --dashboard serves one itself. Other tasks have none.
func (d dashboardFlags) taskHooks(ctx context.Context, f trainFlags, spec *cluster.Spec, self cluster.TaskID,
	cfg estimator.RunConfig, stderr io.Writer) (hooks []estimator.Hook, stop func(), err error) {
	stop = func() {}
	if !cfg.IsChief() {
		return nil, stop, nil
	}
	if url := os.Getenv(envDashboardReport); url != "" && localcluster.IsTask() {
		r := &reporter{url: url, token: os.Getenv(envDashboardToken), log: cfg.Logger}
		r.send(ctx, dashboard.Report{Cluster: clusterMap(spec)})
		return []estimator.Hook{&dashboardHook{self: self, report: r.send}}, stop, nil
	}
	if d.addr == "" {
		return nil, stop, nil
	}
	var opts rpc.Options
	if spec != nil {
		if opts, err = f.security.TaskOptions(spec, self, cfg.Logger); err != nil {
			return nil, nil, fmt.Errorf("--dashboard: %w", err)
		}
	}
	prober := dashboard.NewRPCProber(opts)
	title := f.model
	if spec != nil {
		title += " on " + self.String()
	}
	db, err := dashboard.New(dashboard.Config{Tasks: dashboard.TasksOf(clusterMap(spec)), Prober: prober,
		TraceDir: f.traceDir(), Title: title, Logger: cfg.Logger})
	if err != nil {
		return nil, nil, err
	}
	stopServe, _, err := serveDashboard(ctx, db, d.addr, stderr)
	if err != nil {
		prober.Close()
		return nil, nil, err
	}
	h := &dashboardHook{self: self, report: func(_ context.Context, rep dashboard.Report) { _ = db.Apply(rep) }}
	return []estimator.Hook{h}, func() { stopServe(); prober.Close() }, nil
}

// clusterMap is spec as TF_CONFIG's "cluster" (empty for a single process).
func clusterMap(spec *cluster.Spec) map[string][]string {
	m := map[string][]string{}
	if spec == nil {
		return m
	}
	for _, job := range spec.Jobs() {
		m[job] = spec.Addresses(job)
	}
	return m
}

// dashboardHook tells the dashboard the chief's graph once its session is
// made, and the end of training.
type dashboardHook struct {
	estimator.BaseHook
	self   cluster.TaskID
	report func(context.Context, dashboard.Report)
}

func (h *dashboardHook) AfterCreateSession(ctx context.Context, sess *session.Session) error {
	h.report(ctx, dashboard.Report{Graph: dashboard.FromGraph(sess.Graph(), h.self.String())})
	return nil
}

func (h *dashboardHook) End(ctx context.Context, _ *train.MonitoredSession) error {
	h.report(ctx, dashboard.Report{Finished: true})
	return nil
}

// reporter posts reports to a launcher's dashboard. A report that fails is
// logged and dropped: the dashboard is not worth failing training for.
type reporter struct {
	url, token string
	log        *slog.Logger
}

func (r *reporter) send(ctx context.Context, rep dashboard.Report) {
	body, err := json.Marshal(rep)
	if err != nil {
		r.log.Warn("dashboard: encoding a report", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(body))
	if err != nil {
		r.log.Warn("dashboard: reporting", "url", r.url, "err", err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+r.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.log.Warn("dashboard: reporting to the launcher", "url", r.url, "err", err)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		r.log.Warn("dashboard: the launcher refused a report", "url", r.url, "status", resp.Status)
	}
}
