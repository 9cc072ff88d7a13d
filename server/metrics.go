package server

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/distflow/distflow/metrics"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/worker"
)

// MetricsAddress returns the host:port where the task serves its
// Prometheus metrics (GET /metrics), "" when it serves none or is not
// started. GetStatus reports it as metrics_address.
func (s *Server) MetricsAddress() string {
	if ep := s.cfg.MetricsEndpoint; ep != nil {
		return ep.Addr()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.metricsEP == nil {
		return ""
	}
	return s.metricsEP.Addr()
}

// Metrics returns the task's metrics (nil without Config.MetricsAddress
// or Config.Metrics): a training loop in the same process records its
// steps there, beside the transport's series.
func (s *Server) Metrics() *metrics.Task { return s.metrics }

// newMetrics returns the task's metrics: the configured ones, new ones when
// only an address is given, or nil.
func (c *Config) newMetrics() *metrics.Task {
	switch {
	case c.Metrics != nil:
		c.Metrics.AddDevices(c.Devices)
		return c.Metrics
	case c.MetricsAddress != "":
		m := metrics.New(c.Task.Job, c.Task.Index)
		m.AddDevices(c.Devices)
		return m
	}
	return nil
}

// checkMetricsAddress reports a MetricsAddress that cannot be listened on.
func (c *Config) checkMetricsAddress() error {
	if c.MetricsAddress == "" {
		return nil
	}
	if c.MetricsEndpoint != nil {
		return fmt.Errorf("server: task %s: give MetricsAddress or MetricsEndpoint, not both", c.Task)
	}
	_, port, err := net.SplitHostPort(c.MetricsAddress)
	if err == nil {
		_, err = strconv.ParseUint(port, 10, 16)
	}
	if err != nil {
		return fmt.Errorf("server: task %s: MetricsAddress %q: want host:port (port 0: any free one): %v", c.Task, c.MetricsAddress, err)
	}
	return nil
}

// startMetrics serves the task's metrics, if configured. Called by Start
// with s.mu held.
func (s *Server) startMetrics() error {
	if s.cfg.MetricsAddress == "" || s.metricsEP != nil {
		return nil
	}
	ep, err := metrics.Listen(s.cfg.MetricsAddress, s.metrics, s.log)
	if err != nil {
		return fmt.Errorf("server: task %s: %w", s.task, err)
	}
	s.metricsEP = ep
	s.log.Info("server: serving metrics", "url", ep.URL())
	return nil
}

// stopMetrics stops the metrics endpoint, if any.
func (s *Server) stopMetrics() {
	s.mu.Lock()
	ep := s.metricsEP
	s.mu.Unlock()
	if ep != nil {
		ep.Close()
	}
}

// statusWorker is the task's worker as served: its GetStatus also reports
// where the task's metrics are. Embedding the *worker.Worker keeps its
// optional capabilities (worker.Lender) visible to the transport.
type statusWorker struct {
	*worker.Worker
	s *Server
}

func (w statusWorker) GetStatus(ctx context.Context, req *pb.GetStatusRequest) (*pb.GetStatusResponse, error) {
	resp, err := w.Worker.GetStatus(ctx, req)
	if resp != nil {
		resp.MetricsAddress = w.s.MetricsAddress()
	}
	return resp, err
}
