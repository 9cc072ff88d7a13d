package serving

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/distflow/distflow/savedmodel"
	"github.com/distflow/distflow/tensor"
)

// ErrNoVersion is wrapped by New's error when the base directory holds no
// complete version to serve.
var ErrNoVersion = errors.New("serving: no servable version")

// Config configures a Server. The zero value of every field but BaseDir
// means its default.
type Config struct {
	// BaseDir holds the numbered versions of the model (as
	// savedmodel.WriteVersion writes them); the newest complete one is served.
	BaseDir string
	// ModelName is the NAME of /v1/models/NAME (default "default").
	ModelName string
	// DisableBatching makes every request a Predict call of its own.
	DisableBatching bool
	// MaxBatchSize is the most rows merged into one Predict call (default 64).
	MaxBatchSize int
	// BatchTimeout is the longest a request waits for others to join its
	// batch (default 2ms). A batch closes sooner when no other request is
	// on its way: none is being read or decoded, and yielding the
	// processor to the runnable goroutines brings none.
	BatchTimeout time.Duration
	// BatchThreads is how many batches may run at once (default
	// GOMAXPROCS); requests arriving while all run queue for the next.
	BatchThreads int
	// PollInterval is how often BaseDir is checked for a newer version
	// (default 1s; negative: never, Poll only).
	PollInterval time.Duration
	// WaitForVersion makes New succeed when BaseDir holds no complete
	// version yet, or does not exist yet, as tensorflow_model_server waits
	// for a model's first version: the server answers 503 (the status
	// endpoint too, so that readiness probes fail) until a poll loads one,
	// and logs what it waits for every WaitLogInterval meanwhile. Without
	// it, New fails then.
	WaitForVersion bool
	// WaitLogInterval is how often a server waiting for its first version
	// says so in the log (default 30s).
	WaitLogInterval time.Duration
	// MaxBodyBytes bounds a request body (default 32 MiB); a larger one is
	// answered 413.
	MaxBodyBytes int64
	// Logger receives version changes and load failures (default slog.Default()).
	Logger *slog.Logger
	// MetricsPath is where Prometheus scrapes the server's metrics, under
	// TF Serving's names (default DefaultMetricsPath).
	MetricsPath string
	// DisableMetrics turns the metrics and their path off.
	DisableMetrics bool
	// HTTP bounds what a client can hold of the server: time and header.
	HTTP HTTPConfig
}

// HTTPConfig bounds how long a client may take to send a request and to
// take its answer, and how large a header it may send, so that slow or
// silent clients cannot hold the server's connections and memory. Zero
// fields mean their defaults; negative durations mean no limit.
type HTTPConfig struct {
	// ReadHeaderTimeout bounds the reading of a request's header
	// (default 10s).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds the reading of a request's body (default 30s),
	// plus one second for every MinTransferRate bytes received: a client
	// sending a large body steadily has the time it needs, one sending
	// slower than MinTransferRate is cut off (408) after about ReadTimeout.
	ReadTimeout time.Duration
	// WriteTimeout bounds the writing of an answer (default 30s), plus one
	// second for every MinTransferRate bytes of it; it does not count the
	// time the prediction takes.
	WriteTimeout time.Duration
	// MinTransferRate is the slowest a client may send a body or take an
	// answer beyond the timeouts, in bytes per second (default 256 KiB/s;
	// negative: the timeouts do not grow with the size).
	MinTransferRate int64
	// IdleTimeout closes a kept-alive connection that waits longer for its
	// next request (default 2m).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's header (default 64 KiB); a larger
	// one is answered 431.
	MaxHeaderBytes int
}

func (h HTTPConfig) withDefaults() HTTPConfig {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&h.ReadHeaderTimeout, 10*time.Second)
	def(&h.ReadTimeout, 30*time.Second)
	def(&h.WriteTimeout, 30*time.Second)
	def(&h.IdleTimeout, 2*time.Minute)
	if h.MinTransferRate == 0 {
		h.MinTransferRate = 256 << 10
	}
	if h.MaxHeaderBytes == 0 {
		h.MaxHeaderBytes = 64 << 10
	}
	return h
}

// Validate reports the first invalid field, by name.
func (h HTTPConfig) Validate() error {
	if h.MaxHeaderBytes < 0 {
		return fmt.Errorf("serving: config: HTTP.MaxHeaderBytes is %d, want > 0", h.MaxHeaderBytes)
	}
	return nil
}

// server returns the http.Server that serves handler under h's limits
// (h has its defaults). The handler sets the deadlines of the bodies it
// reads and the answers it writes; ReadTimeout only bounds the bodies
// that no handler reads, which net/http discards after the answer.
func (h HTTPConfig) server(handler http.Handler) *http.Server {
	// net/http reads a negative timeout as none, as HTTPConfig does.
	hs := &http.Server{Handler: handler, MaxHeaderBytes: h.MaxHeaderBytes,
		ReadHeaderTimeout: h.ReadHeaderTimeout, IdleTimeout: h.IdleTimeout}
	if h.ReadHeaderTimeout > 0 && h.ReadTimeout > 0 {
		hs.ReadTimeout = h.ReadHeaderTimeout + h.ReadTimeout
	}
	return hs
}

// transferTime is the time to move n bytes at MinTransferRate.
func (h HTTPConfig) transferTime(n int64) time.Duration {
	if h.MinTransferRate <= 0 || n <= 0 {
		return 0
	}
	return time.Duration(float64(n) / float64(h.MinTransferRate) * float64(time.Second))
}

// writeDeadline sets the deadline for writing an answer of n bytes.
func (h HTTPConfig) writeDeadline(w http.ResponseWriter, n int) {
	var t time.Time // none
	if h.WriteTimeout > 0 {
		t = time.Now().Add(h.WriteTimeout + h.transferTime(int64(n)))
	}
	// A writer without deadlines (a test's recorder) has nothing to bound.
	http.NewResponseController(w).SetWriteDeadline(t)
}

func (c Config) withDefaults() Config {
	if c.ModelName == "" {
		c.ModelName = "default"
	}
	if c.MaxBatchSize == 0 {
		c.MaxBatchSize = 64
	}
	if c.BatchTimeout == 0 {
		c.BatchTimeout = 2 * time.Millisecond
	}
	if c.BatchThreads == 0 {
		c.BatchThreads = runtime.GOMAXPROCS(0)
	}
	if c.PollInterval == 0 {
		c.PollInterval = time.Second
	}
	if c.WaitLogInterval <= 0 {
		c.WaitLogInterval = 30 * time.Second
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 32 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MetricsPath == "" {
		c.MetricsPath = DefaultMetricsPath
	}
	c.HTTP = c.HTTP.withDefaults()
	return c
}

// Validate reports the first invalid field, by name.
func (c Config) Validate() error {
	switch {
	case c.BaseDir == "":
		return errors.New("serving: config: BaseDir is empty")
	case strings.ContainsAny(c.ModelName, "/:"):
		return fmt.Errorf("serving: config: ModelName %q may not contain '/' or ':'", c.ModelName)
	case c.MaxBatchSize < 0:
		return fmt.Errorf("serving: config: MaxBatchSize is %d, want > 0", c.MaxBatchSize)
	case c.BatchTimeout < 0:
		return fmt.Errorf("serving: config: BatchTimeout is %v, want > 0", c.BatchTimeout)
	case c.BatchThreads < 0:
		return fmt.Errorf("serving: config: BatchThreads is %d, want > 0", c.BatchThreads)
	case c.MaxBodyBytes < 0:
		return fmt.Errorf("serving: config: MaxBodyBytes is %d, want > 0", c.MaxBodyBytes)
	}
	if err := c.HTTP.Validate(); err != nil {
		return err
	}
	return CheckMetricsPath(c.MetricsPath)
}

// CheckMetricsPath refuses a metrics path that is not one or that the
// model API would answer ("": the default).
func CheckMetricsPath(p string) error {
	if p != "" && (!strings.HasPrefix(p, "/") || strings.HasPrefix(p, "/v1/")) {
		return fmt.Errorf("serving: config: MetricsPath %q must start with '/' and not with /v1/ (the model API's)", p)
	}
	return nil
}

// servable is one loaded version. Requests hold a reference while they use
// it; a retired servable is closed when its last reference is released.
type servable struct {
	version   int64
	pred      *savedmodel.Predictor
	batcher   *batcher // nil: no batching
	names     []string // input names, sorted
	batchable bool     // every input and output has a batch dimension

	mu      sync.Mutex
	refs    int
	retired bool
	closed  chan struct{}
}

func (sv *servable) release() {
	sv.mu.Lock()
	sv.refs--
	last := sv.refs == 0 && sv.retired
	sv.mu.Unlock()
	if last {
		sv.close()
	}
}

func (sv *servable) retire() {
	sv.mu.Lock()
	sv.retired = true
	last := sv.refs == 0
	sv.mu.Unlock()
	if last {
		sv.close()
	}
}

func (sv *servable) close() {
	// No request holds sv, so no batch runs: batches run on their
	// requests' goroutines.
	sv.pred.Close()
	close(sv.closed)
}

// Server serves one model over TensorFlow Serving's REST API: the newest
// complete version under Config.BaseDir, switching to a newer one when it
// appears. It is an http.Handler; Serve runs it on a listener with the
// polling loop. It is safe for concurrent use.
type Server struct {
	cfg     Config
	log     *slog.Logger
	metrics *serverMetrics // nil when disabled
	scrape  http.Handler

	pollMu  sync.Mutex       // serialises Poll
	logged  map[int64]string // versions whose failure was logged, with the message
	waitLog time.Time        // when the wait for a first version was last logged
	mu      sync.Mutex       // guards cur and closed
	cur     *servable        // the version requests go to
	closed  bool
}

// New loads the newest complete version under cfg.BaseDir and returns a
// server for it. Unless cfg.WaitForVersion, it fails, wrapping
// ErrNoVersion, when there is none; the error names the directory.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	var fam *metricFamilies
	if !cfg.DisableMetrics {
		fam = newMetricFamilies()
	}
	s, err := newServer(cfg, fam)
	if err != nil {
		return nil, err
	}
	if fam != nil {
		s.scrape = fam.handler()
	}
	return s, nil
}

// newServer is New with its metrics in fam (nil: none), and no scrape path
// of its own. cfg is valid and has its defaults.
func newServer(cfg Config, fam *metricFamilies) (*Server, error) {
	s := &Server{cfg: cfg, log: cfg.Logger, logged: map[int64]string{}}
	if fam != nil {
		s.metrics = fam.model(cfg.ModelName)
	}
	err := s.Poll(context.Background())
	if err != nil && !(cfg.WaitForVersion && errors.Is(err, savedmodel.ErrNotFound)) {
		return nil, err
	}
	if s.cur == nil && !cfg.WaitForVersion {
		return nil, fmt.Errorf("serving: %s holds no complete model version (%s): %w", cfg.BaseDir, exportHint, ErrNoVersion)
	}
	s.logWait(err)
	return s, nil
}

// exportHint says how a version is made.
const exportHint = "a version is a numbered directory with a model.json, as distflow train --export DIR or savedmodel.WriteVersion writes it"

// logWait logs, at most every WaitLogInterval, that the server waits for
// its first version (err: why the last poll found none, if it failed).
func (s *Server) logWait(err error) {
	if s.Version() != 0 || time.Since(s.waitLog) < s.cfg.WaitLogInterval {
		return
	}
	s.waitLog = time.Now()
	args := []any{"model", s.cfg.ModelName, "dir", s.cfg.BaseDir, "how", exportHint}
	if err != nil {
		args = append(args, "err", err)
	}
	s.log.Info("serving: waiting for the model's first version", args...)
}

// Version returns the version being served.
func (s *Server) Version() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return 0
	}
	return s.cur.version
}

// Poll checks BaseDir now and, if a complete version newer than the served
// one loads, switches to it: requests already holding the old version finish
// on it, and it is closed after the last. A version that is incomplete or
// fails to load is skipped and logged once (it is checked again at the next
// poll, in case it was being copied). Poll returns an error only when BaseDir
// cannot be listed.
func (s *Server) Poll(ctx context.Context) error {
	s.pollMu.Lock()
	defer s.pollMu.Unlock()
	st, err := savedmodel.Scan(s.cfg.BaseDir)
	if err != nil {
		return fmt.Errorf("serving: polling for versions: %w", err)
	}
	current := s.Version()
	for i := len(st) - 1; i >= 0 && st[i].Version > current; i-- {
		if err := ctx.Err(); err != nil {
			return err
		}
		v := st[i]
		if v.Err != nil {
			s.logOnce(v.Version, "serving: ignoring an incomplete version", v.Err)
			continue
		}
		sv, err := s.load(v.Version, v.Dir)
		if err != nil {
			s.logOnce(v.Version, "serving: cannot load a version", err)
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			sv.retire()
			return nil
		}
		old := s.cur
		s.cur = sv
		s.mu.Unlock()
		delete(s.logged, v.Version)
		if old != nil {
			s.log.Info("serving: switched version", "model", s.cfg.ModelName, "from", old.version, "to", v.Version, "dir", v.Dir)
			old.retire()
		} else {
			s.log.Info("serving: loaded version", "model", s.cfg.ModelName, "version", v.Version, "dir", v.Dir)
		}
		return nil
	}
	return nil
}

func (s *Server) logOnce(version int64, msg string, err error) {
	if s.logged[version] == err.Error() {
		return
	}
	s.logged[version] = err.Error()
	s.log.Warn(msg, "model", s.cfg.ModelName, "version", version, "err", err)
}

func (s *Server) load(version int64, dir string) (*servable, error) {
	p, err := savedmodel.Load(dir)
	if err != nil {
		return nil, err
	}
	sig := p.Signature()
	sv := &servable{version: version, pred: p, names: sig.InputNames(), batchable: true, closed: make(chan struct{})}
	for _, m := range []map[string]savedmodel.TensorInfo{sig.Inputs, sig.Outputs} {
		for _, ti := range m {
			if ti.Shape.Rank() < 1 || ti.Shape.Dim(0) >= 0 {
				sv.batchable = false
			}
		}
	}
	if !s.cfg.DisableBatching && sv.batchable {
		sv.batcher = newBatcher(p, s.cfg.MaxBatchSize, s.cfg.BatchTimeout, s.cfg.BatchThreads, s.metrics)
	}
	return sv, nil
}

// acquire returns the served version with a reference the caller releases.
func (s *Server) acquire() *servable {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.cur == nil {
		return nil
	}
	sv := s.cur
	sv.mu.Lock()
	sv.refs++
	sv.mu.Unlock()
	return sv
}

// Close stops serving: later requests get 503, and the loaded version is
// closed once the requests using it end. Close does not wait for them.
func (s *Server) Close() error {
	s.mu.Lock()
	sv := s.cur
	s.cur, s.closed = nil, true
	s.mu.Unlock()
	if sv != nil {
		sv.retire()
	}
	return nil
}

// Serve serves HTTP on ln and polls BaseDir every PollInterval until ctx is
// done; it then shuts the HTTP server down gracefully (in-flight requests
// finish, for at most shutdownGrace), closes the server and returns nil. It
// returns early with the error of a failing listener.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	return serve(ctx, ln, s.cfg.HTTP.server(s), []*Server{s})
}

// serve serves hs on ln and polls each of servers every PollInterval
// until ctx is done; it then shuts the HTTP server down gracefully
// (in-flight requests finish, for at most shutdownGrace), closes the
// servers and returns nil. It returns early with the error of a failing
// listener.
func serve(ctx context.Context, ln net.Listener, hs *http.Server, servers []*Server) error {
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	pctx, stopPolls := context.WithCancel(ctx)
	var polls sync.WaitGroup
	for _, s := range servers {
		if s.cfg.PollInterval > 0 {
			polls.Go(func() { s.pollEvery(pctx) })
		}
	}
	defer func() {
		stopPolls()
		polls.Wait()
		for _, s := range servers {
			s.Close()
		}
	}()
	select {
	case err := <-errc:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		err := hs.Shutdown(sctx)
		cancel()
		if err != nil {
			return fmt.Errorf("serving: shutting down: %w", err)
		}
		return nil
	}
}

// pollEvery polls BaseDir every PollInterval until ctx is done.
func (s *Server) pollEvery(ctx context.Context) {
	t := time.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			err := s.Poll(ctx)
			switch {
			case ctx.Err() != nil:
			case s.Version() == 0 && (err == nil || errors.Is(err, savedmodel.ErrNotFound)):
				s.logWait(err)
			case err != nil:
				s.log.Warn("serving: poll failed", "model", s.cfg.ModelName, "err", err)
			}
		}
	}
}

const shutdownGrace = 10 * time.Second

// httpError is an answer other than 200: a status and TF Serving's
// {"error": message}.
type httpError struct {
	status int
	msg    string
	cause  error // when it tells more than the status (a deadline), for the metrics
}

func (e *httpError) Error() string { return e.msg }

// jsonContentType is shared by every answer's header, unmodified.
var jsonContentType = []string{"application/json"}

func (s *Server) writeJSON(w http.ResponseWriter, status int, body []byte) {
	s.cfg.HTTP.writeDeadline(w, len(body))
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(status)
	w.Write(body)
}

func (s *Server) writeError(w http.ResponseWriter, e *httpError) {
	b := []byte(`{"error":`)
	b = strconv.AppendQuote(b, e.msg)
	s.writeJSON(w, e.status, append(b, "}\n"...))
}

// route is a parsed /v1/models/... path.
type route struct {
	name    string
	version int64  // 0: the served one
	verb    string // "", "metadata", "predict"
}

// parsePath splits /v1/models/NAME[/versions/V][/metadata|:predict].
func parsePath(p string) (route, bool) {
	rest, ok := strings.CutPrefix(p, "/v1/models/")
	if !ok || rest == "" {
		return route{}, false
	}
	var r route
	if i := strings.LastIndexByte(rest, ':'); i >= 0 && !strings.Contains(rest[i:], "/") {
		r.verb = rest[i+1:]
		if r.verb != "predict" {
			return route{}, false
		}
		rest = rest[:i]
	}
	parts := strings.Split(rest, "/")
	if r.verb == "" && len(parts) > 1 && parts[len(parts)-1] == "metadata" {
		r.verb = "metadata"
		parts = parts[:len(parts)-1]
	}
	switch {
	case len(parts) == 1:
	case len(parts) == 3 && parts[1] == "versions":
		v, err := strconv.ParseInt(parts[2], 10, 64)
		if err != nil || v <= 0 {
			return route{}, false
		}
		r.version = v
	default:
		return route{}, false
	}
	if parts[0] == "" {
		return route{}, false
	}
	r.name = parts[0]
	return r, true
}

// ServeHTTP answers the REST API and, unless disabled, Prometheus' scrapes
// at Config.MetricsPath. A panic in a handler is answered 500.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var herr *httpError
	counted := false // a predict request of the served model: in the metrics
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("serving: handler panicked", "path", r.URL.Path, "panic", p)
			herr = &httpError{status: http.StatusInternalServerError, msg: fmt.Sprintf("internal error: %v", p)}
			s.writeError(w, herr)
		}
		if counted {
			s.metrics.request(s.cfg.ModelName, start, herr)
		}
	}()
	if s.scrape != nil && r.URL.Path == s.cfg.MetricsPath {
		s.cfg.HTTP.writeDeadline(w, 0)
		s.scrape.ServeHTTP(w, r)
		return
	}
	rt, ok := parsePath(r.URL.Path)
	if !ok {
		s.writeError(w, &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("Malformed request: %s %s (want /v1/models/NAME[/versions/V][/metadata|:predict])", r.Method, r.URL.Path)})
		return
	}
	counted = rt.verb == "predict" && rt.name == s.cfg.ModelName
	want := http.MethodGet
	if rt.verb == "predict" {
		want = http.MethodPost
	}
	if r.Method != want {
		w.Header().Set("Allow", want)
		herr = &httpError{status: http.StatusMethodNotAllowed, msg: fmt.Sprintf("Method %s not allowed on %s (use %s)", r.Method, r.URL.Path, want)}
		s.writeError(w, herr)
		return
	}
	sv, herr := s.servableFor(rt)
	if herr != nil {
		s.writeError(w, herr)
		return
	}
	defer sv.release()
	var body []byte
	switch rt.verb {
	case "":
		body = statusBody(sv.version)
	case "metadata":
		body = metadataBody(s.cfg.ModelName, sv.version, sv.pred.Signature())
	case "predict":
		buf := bufPool.Get().(*[]byte)
		defer putBuffer(buf) // after the answer is written
		body, herr = s.predict(w, r, sv, buf)
	}
	if herr != nil {
		s.writeError(w, herr)
		return
	}
	s.writeJSON(w, http.StatusOK, body)
}

func (s *Server) servableFor(rt route) (*servable, *httpError) {
	spec := func() string {
		if rt.version != 0 {
			return fmt.Sprintf("Specific(%s, %d)", rt.name, rt.version)
		}
		return fmt.Sprintf("Latest(%s)", rt.name)
	}
	if rt.name != s.cfg.ModelName {
		return nil, &httpError{status: http.StatusNotFound, msg: "Servable not found for request: " + spec()}
	}
	sv := s.acquire()
	if sv == nil {
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if !closed {
			// As TF Serving words it, with 503 rather than 404: the model
			// is known and will be served, so readiness probes wait.
			return nil, &httpError{status: http.StatusServiceUnavailable, msg: fmt.Sprintf("Could not find any versions of model %s (waiting for a first complete version under %s)", rt.name, s.cfg.BaseDir)}
		}
		return nil, &httpError{status: http.StatusServiceUnavailable, msg: "the server is shutting down"}
	}
	if rt.version != 0 && rt.version != sv.version {
		sv.release()
		return nil, &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("Servable not found for request: %s (version %d is served)", spec(), sv.version)}
	}
	return sv, nil
}

// predict answers a predict request. buf is a pooled buffer for the body
// and then the answer, which is returned in it.
func (s *Server) predict(w http.ResponseWriter, r *http.Request, sv *servable, buf *[]byte) ([]byte, *httpError) {
	batched := sv.batcher != nil
	if batched {
		sv.batcher.incoming.Add(1)
	}
	submitted := false
	defer func() {
		if batched && !submitted {
			sv.batcher.incoming.Add(-1)
		}
	}()
	limit := s.cfg.MaxBodyBytes
	if r.ContentLength > limit {
		// Refused before reading: the connection closes rather than
		// receive a body that is not wanted.
		w.Header().Set("Connection", "close")
		return nil, &httpError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("request body is larger than the limit of %d bytes (Content-Length: %d)", limit, r.ContentLength)}
	}
	// Size the buffer from Content-Length, room for the EOF read included,
	// but only up to maxPooledBuffer: a larger body grows it as its bytes
	// arrive, so that a header alone cannot make the server allocate.
	if n := r.ContentLength; n > 0 && n < maxPooledBuffer && int64(cap(*buf)) < n+1 {
		*buf = make([]byte, 0, n+1)
	}
	raw, err := s.readBody(w, r, (*buf)[:0], limit)
	*buf = raw
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return nil, &httpError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("request body is larger than the limit of %d bytes", mbe.Limit)}
		case errors.Is(err, os.ErrDeadlineExceeded):
			w.Header().Set("Connection", "close")
			return nil, &httpError{status: http.StatusRequestTimeout, msg: fmt.Sprintf("reading the request body: %d bytes received, too slowly (the body must arrive within %v, and one more second for every %d bytes received)", len(raw), s.cfg.HTTP.ReadTimeout, s.cfg.HTTP.MinTransferRate)}
		}
		return nil, &httpError{status: http.StatusBadRequest, msg: fmt.Sprintf("reading the request body: %v", err)}
	}
	sig := sv.pred.Signature()
	req, err := decodeNamed(raw, sig, sv.names)
	if err != nil {
		return nil, &httpError{status: http.StatusBadRequest, msg: strings.TrimPrefix(err.Error(), errBadRequest.Error()+": ")}
	}
	if err := sv.pred.CheckInputs(req.inputs); err != nil {
		return nil, &httpError{status: http.StatusBadRequest, msg: strings.TrimPrefix(err.Error(), "savedmodel: ")}
	}
	var out map[string]*tensor.Tensor
	if key, rows, ok := batchKey(req.inputs, sv.names); batched && ok && rows <= s.cfg.MaxBatchSize {
		submitted = true
		out, err = sv.batcher.submit(r.Context(), &batchItem{inputs: req.inputs, rows: rows, key: key, done: make(chan batchResult, 1)})
	} else {
		out, err = s.metrics.predict(r.Context(), sv.pred, req.inputs)
	}
	if err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, savedmodel.ErrBadInput) {
			status = http.StatusBadRequest
		}
		return nil, &httpError{status: status, msg: strings.TrimPrefix(err.Error(), "savedmodel: "), cause: err}
	}
	// The request is decoded (it does not alias raw): the buffer now takes
	// the answer.
	body, err := encodeResponse(raw[:0], req, out)
	*buf = body
	if err != nil {
		return nil, &httpError{status: http.StatusBadRequest, msg: err.Error()}
	}
	return body, nil
}

// readBody reads r's body into b's spare capacity, at most limit bytes,
// under a deadline that moves with the bytes received: ReadTimeout from
// now, plus a second for every MinTransferRate bytes. Once the body is
// read, the connection has no read deadline: net/http's read in the
// background, which tells a client that went away, must not time out
// during a long prediction (that would cancel the request).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, b []byte, limit int64) ([]byte, error) {
	h := s.cfg.HTTP
	rc := http.NewResponseController(w)
	if h.ReadTimeout <= 0 {
		rc.SetReadDeadline(time.Time{})
		return readAll(http.MaxBytesReader(w, r.Body, limit), b, nil)
	}
	start := time.Now()
	rc.SetReadDeadline(start.Add(h.ReadTimeout))
	if r.Header.Get("Expect") != "" {
		// net/http writes "100 Continue" on the first read: not under the
		// deadline of an earlier answer on this connection.
		rc.SetWriteDeadline(time.Time{})
	}
	var moved int64 // bytes received when the deadline last moved
	step := max(h.MinTransferRate/4, 4096)
	b, err := readAll(http.MaxBytesReader(w, r.Body, limit), b, func(n int64) {
		if h.MinTransferRate > 0 && n-moved >= step {
			moved = n
			rc.SetReadDeadline(start.Add(h.ReadTimeout + h.transferTime(n)))
		}
	})
	if err == nil {
		rc.SetReadDeadline(time.Time{})
	}
	return b, err
}

// readAll is io.ReadAll into b's spare capacity; progress, if not nil, is
// told the bytes read so far after each read.
func readAll(r io.Reader, b []byte, progress func(int64)) ([]byte, error) {
	start := len(b)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if progress != nil {
			progress(int64(len(b) - start))
		}
	}
}

// bufPool holds the buffers that take a request body and then its answer,
// so that a request allocates neither.
var bufPool = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledBuffer bounds the buffers kept for reuse.
const maxPooledBuffer = 1 << 20

func putBuffer(b *[]byte) {
	if cap(*b) <= maxPooledBuffer {
		*b = (*b)[:0]
		bufPool.Put(b)
	}
}

func statusBody(version int64) []byte {
	return fmt.Appendf(nil, `{"model_version_status":[{"version":"%d","state":"AVAILABLE","status":{"error_code":"OK","error_message":""}}]}`+"\n", version)
}

var tfDTypes = map[tensor.DType]string{
	tensor.Float32: "DT_FLOAT", tensor.Float64: "DT_DOUBLE", tensor.Int32: "DT_INT32",
	tensor.Int64: "DT_INT64", tensor.Bool: "DT_BOOL", tensor.Uint8: "DT_UINT8",
}

// metadataBody is TF Serving's GetModelMetadata answer: the signature_def
// map with the one signature, serving_default.
func metadataBody(name string, version int64, sig savedmodel.Signature) []byte {
	b := []byte(`{"model_spec":{"name":`)
	b = strconv.AppendQuote(b, name)
	b = fmt.Appendf(b, `,"signature_name":"","version":"%d"},"metadata":{"signature_def":{"signature_def":{"serving_default":{`, version)
	for i, part := range []struct {
		key   string
		infos map[string]savedmodel.TensorInfo
		names []string
	}{{"inputs", sig.Inputs, sig.InputNames()}, {"outputs", sig.Outputs, sig.OutputNames()}} {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, part.key...)
		b = append(b, `":{`...)
		for j, n := range part.names {
			ti := part.infos[n]
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendQuote(b, n)
			b = append(b, `:{"dtype":"`...)
			b = append(b, tfDTypes[ti.DType]...)
			b = append(b, `","tensor_shape":{`...)
			if ti.Shape.KnownRank() {
				b = append(b, `"dim":[`...)
				for k, d := range ti.Shape.Dims() {
					if k > 0 {
						b = append(b, ',')
					}
					b = fmt.Appendf(b, `{"size":"%d","name":""}`, d)
				}
				b = append(b, `],"unknown_rank":false},"name":`...)
			} else {
				b = append(b, `"dim":[],"unknown_rank":true},"name":`...)
			}
			b = strconv.AppendQuote(b, ti.Name)
			b = append(b, '}')
		}
		b = append(b, '}')
	}
	return append(b, `,"method_name":"tensorflow/serving/predict"}}}}}`+"\n"...)
}
