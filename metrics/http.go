package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Path is where an Endpoint serves the metrics.
const Path = "/metrics"

// Handler returns the HTTP handler of t's metrics in Prometheus' text (or,
// when the scraper asks for it, protobuf) format.
func (t *Task) Handler() http.Handler {
	return promhttp.HandlerFor(t.Gatherer(), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Endpoint serves a task's metrics over HTTP at Path.
type Endpoint struct {
	lis  net.Listener
	srv  *http.Server
	done chan struct{}
}

// Listen serves t's metrics on addr ("127.0.0.1:0" picks a free port;
// Addr tells which) until Close.
func Listen(addr string, t *Task, log *slog.Logger) (*Endpoint, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listening on %s: %w (choose another --metrics-port, or 0 for none)", addr, err)
	}
	return Serve(lis, t, log), nil
}

// Serve serves t's metrics on lis until Close, which closes lis. log (nil:
// slog.Default()) receives a serving failure.
func Serve(lis net.Listener, t *Task, log *slog.Logger) *Endpoint {
	if log == nil {
		log = slog.Default()
	}
	mux := http.NewServeMux()
	mux.Handle(Path, t.Handler())
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, "distflow task /job:%s/task:%d: metrics at %s\n", t.Job(), t.Index(), Path)
	})
	e := &Endpoint{lis: lis, done: make(chan struct{}),
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: time.Minute}}
	go func() {
		defer close(e.done)
		if err := e.srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics: serving failed", "addr", lis.Addr().String(), "err", err)
		}
	}()
	return e
}

// Addr returns the endpoint's host:port.
func (e *Endpoint) Addr() string { return e.lis.Addr().String() }

// URL returns the address of the metrics, "http://127.0.0.1:9100/metrics".
func (e *Endpoint) URL() string { return "http://" + e.Addr() + Path }

// Close stops serving, letting scrapes in progress finish for up to a
// second. It is idempotent.
func (e *Endpoint) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := e.srv.Shutdown(ctx)
	if err != nil {
		err = e.srv.Close()
	}
	<-e.done
	return err
}
