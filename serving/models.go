package serving

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
)

// ModelsConfig configures Models: the models, and the metrics path they
// share.
type ModelsConfig struct {
	// Models are the models served, one Config each (its ModelName,
	// BaseDir, batching and polling; its metrics and HTTP settings are
	// ignored). Their names must differ.
	Models []Config
	// MetricsPath is where Prometheus scrapes every model's metrics
	// (default DefaultMetricsPath); DisableMetrics turns them off.
	MetricsPath    string
	DisableMetrics bool
	// HTTP bounds what a client can hold of the server, for every model.
	HTTP HTTPConfig
}

// Models serves several models over one REST API, as tensorflow_model_server
// does with --model_config_file: each is a Server of its own (its versions,
// its batching), and /v1/models/NAME goes to the one called NAME. It is an
// http.Handler; Serve runs it on a listener with every model's polling.
type Models struct {
	byName      map[string]*Server
	servers     []*Server // in configuration order
	metricsPath string
	http        HTTPConfig
	scrape      http.Handler // nil without metrics
}

// NewModels loads the newest complete version of every model. An error
// names the model at fault; nothing is left loaded then.
func NewModels(cfg ModelsConfig) (*Models, error) {
	if len(cfg.Models) == 0 {
		return nil, errors.New("serving: no model to serve")
	}
	if cfg.MetricsPath == "" {
		cfg.MetricsPath = DefaultMetricsPath
	}
	if err := CheckMetricsPath(cfg.MetricsPath); err != nil {
		return nil, err
	}
	if err := cfg.HTTP.Validate(); err != nil {
		return nil, err
	}
	cfg.HTTP = cfg.HTTP.withDefaults()
	m := &Models{byName: map[string]*Server{}, metricsPath: cfg.MetricsPath, http: cfg.HTTP}
	var fam *metricFamilies
	if !cfg.DisableMetrics {
		fam = newMetricFamilies()
		m.scrape = fam.handler()
	}
	for i, c := range cfg.Models {
		c.HTTP = cfg.HTTP
		err := c.Validate()
		c = c.withDefaults()
		if err == nil && m.byName[c.ModelName] != nil {
			err = fmt.Errorf("serving: the name %q is given to two models", c.ModelName)
		}
		var s *Server
		if err == nil {
			s, err = newServer(c, fam)
		}
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("serving: model %d (%q, %s): %w", i+1, c.ModelName, c.BaseDir, err)
		}
		m.byName[c.ModelName] = s
		m.servers = append(m.servers, s)
	}
	return m, nil
}

// Server returns the server of the model called name, or nil.
func (m *Models) Server(name string) *Server { return m.byName[name] }

// ServeHTTP answers the REST API of every model and, unless disabled,
// Prometheus' scrapes.
func (m *Models) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if m.scrape != nil && r.URL.Path == m.metricsPath {
		m.http.writeDeadline(w, 0)
		m.scrape.ServeHTTP(w, r)
		return
	}
	s := m.servers[0] // answers what no model's server does: its errors are the API's
	if named := m.byName[modelName(r.URL.Path)]; named != nil {
		s = named
	}
	s.ServeHTTP(w, r)
}

// modelName is the NAME of /v1/models/NAME[/...|:...] ("" for another
// path), without allocating; the server checks the rest.
func modelName(path string) string {
	rest, ok := strings.CutPrefix(path, "/v1/models/")
	if !ok {
		return ""
	}
	if i := strings.IndexAny(rest, "/:"); i >= 0 {
		return rest[:i]
	}
	return rest
}

// Serve serves HTTP on ln and polls every model's BaseDir until ctx is
// done, as Server.Serve does; it then closes every model.
func (m *Models) Serve(ctx context.Context, ln net.Listener) error {
	return serve(ctx, ln, m.http.server(m), m.servers)
}

// Close stops serving every model (see Server.Close).
func (m *Models) Close() error {
	for _, s := range m.servers {
		s.Close()
	}
	return nil
}
