package serving

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/distflow/distflow/savedmodel"
	"github.com/distflow/distflow/savedmodel/savedmodeltest"
	"github.com/distflow/distflow/tensor"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func built(t testing.TB, f func() (*savedmodeltest.Built, error)) *savedmodeltest.Built {
	t.Helper()
	b, err := f()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func small(v int) func() (*savedmodeltest.Built, error) {
	return func() (*savedmodeltest.Built, error) { return savedmodeltest.Small(v) }
}

func mlp() (*savedmodeltest.Built, error) { return savedmodeltest.MLP(1) }
func cnn() (*savedmodeltest.Built, error) { return savedmodeltest.CNN(1) }

// start exports b as version 1 of a new base dir and serves it over HTTP
// on 127.0.0.1.
func start(t testing.TB, b *savedmodeltest.Built, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	if cfg.BaseDir == "" {
		cfg.BaseDir = t.TempDir()
		if _, _, err := savedmodel.WriteVersion(cfg.BaseDir, b.Model); err != nil {
			t.Fatal(err)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = -1
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(func() { hs.Close(); s.Close() })
	return s, hs
}

func do(t testing.TB, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q", method, url, ct)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("%s %s: answer is not JSON: %v\n%s", method, url, err, raw)
	}
	return resp.StatusCode, m
}

// jsonOf renders a tensor as the nested lists a client sends.
func jsonOf(t *tensor.Tensor) string { return string(appendTensor(nil, t)) }

func rowJSON(t *tensor.Tensor, i int) string { return string(appendRow(nil, t, i)) }

// checkValue compares a decoded JSON value with a tensor, float32 bit for bit.
func checkValue(t *testing.T, what string, got any, want *tensor.Tensor) {
	t.Helper()
	var flat []any
	var shape []int
	var walk func(x any, depth int)
	walk = func(x any, depth int) {
		if l, ok := x.([]any); ok {
			if len(shape) <= depth {
				shape = append(shape, len(l))
			}
			for _, e := range l {
				walk(e, depth+1)
			}
			return
		}
		flat = append(flat, x)
	}
	walk(got, 0)
	if fmt.Sprint(shape) != fmt.Sprint(want.Shape()) || len(flat) != want.NumElements() {
		t.Fatalf("%s: shape %v (%d values), want %v", what, shape, len(flat), want.Shape())
	}
	for i, x := range flat {
		n, ok := x.(json.Number)
		if !ok {
			t.Fatalf("%s: element %d is %T", what, i, x)
		}
		switch want.DType() {
		case tensor.Float32:
			f, err := strconv.ParseFloat(string(n), 32)
			if err != nil || math.Float32bits(float32(f)) != math.Float32bits(want.Float32s()[i]) {
				t.Fatalf("%s: element %d is %s, want the bits of %v", what, i, n, want.Float32s()[i])
			}
		case tensor.Int32:
			if string(n) != strconv.Itoa(int(want.Int32s()[i])) {
				t.Fatalf("%s: element %d is %s, want %d", what, i, n, want.Int32s()[i])
			}
		}
	}
}

func TestStatusAndMetadata(t *testing.T) {
	b := built(t, small(1))
	_, hs := start(t, b, Config{ModelName: "m"})
	for _, path := range []string{"/v1/models/m", "/v1/models/m/versions/1"} {
		code, m := do(t, "GET", hs.URL+path, "")
		want := `map[model_version_status:[map[state:AVAILABLE status:map[error_code:OK error_message:] version:1]]]`
		if code != 200 || fmt.Sprint(m) != want {
			t.Errorf("GET %s = %d %v, want 200 %s", path, code, m, want)
		}
	}
	for _, path := range []string{"/v1/models/m/metadata", "/v1/models/m/versions/1/metadata"} {
		code, m := do(t, "GET", hs.URL+path, "")
		if code != 200 {
			t.Fatalf("GET %s = %d %v", path, code, m)
		}
		sd := m["metadata"].(map[string]any)["signature_def"].(map[string]any)["signature_def"].(map[string]any)["serving_default"].(map[string]any)
		x := sd["inputs"].(map[string]any)["x"].(map[string]any)
		if fmt.Sprint(x) != "map[dtype:DT_FLOAT name:x:0 tensor_shape:map[dim:[map[name: size:-1] map[name: size:3]] unknown_rank:false]]" {
			t.Errorf("metadata of input x: %v", x)
		}
		if k2 := sd["outputs"].(map[string]any)["k2"].(map[string]any); k2["dtype"] != "DT_INT32" {
			t.Errorf("metadata of output k2: %v", k2)
		}
		if spec := fmt.Sprint(m["model_spec"]); spec != "map[name:m signature_name: version:1]" {
			t.Errorf("model_spec %s", spec)
		}
	}
	for _, c := range []struct {
		method, path string
		code         int
		msg          string
	}{
		{"GET", "/v1/models/other", 404, "Servable not found for request: Latest(other)"},
		{"GET", "/v1/models/m/versions/7", 404, "Specific(m, 7)"},
		{"POST", "/v1/models/m/versions/7:predict", 404, "Specific(m, 7)"},
		{"GET", "/v1/models/m/versions/x", 404, "Malformed request"},
		{"GET", "/v2/foo", 404, "Malformed request"},
		{"GET", "/v1/models/m:classify", 404, "Malformed request"},
		{"POST", "/v1/models/m", 405, "use GET"},
		{"DELETE", "/v1/models/m/metadata", 405, "use GET"},
		{"GET", "/v1/models/m:predict", 405, "use POST"},
	} {
		code, m := do(t, c.method, hs.URL+c.path, "")
		if code != c.code || !strings.Contains(fmt.Sprint(m["error"]), c.msg) {
			t.Errorf("%s %s = %d %v, want %d and an error mentioning %q", c.method, c.path, code, m, c.code, c.msg)
		}
	}
}

func TestPredictFormats(t *testing.T) {
	ctx := context.Background()
	sm := built(t, small(1))
	cn := built(t, cnn)
	_, smallHS := start(t, sm, Config{})
	_, cnnHS := start(t, cn, Config{})

	x := tensor.MustFromSlice([]float32{0.1, 0.2, 0.3, -1, 2.5, 1e-7}, 2, 3)
	k := tensor.MustFromSlice([]int32{7, -8}, 2)
	smallWant, err := sm.Run(ctx, map[string]*tensor.Tensor{"x": x, "k": k})
	if err != nil {
		t.Fatal(err)
	}
	imgs := savedmodeltest.Images(3, 5)
	cnnWant, err := cn.Run(ctx, map[string]*tensor.Tensor{"images": imgs})
	if err != nil {
		t.Fatal(err)
	}
	row := func(t *tensor.Tensor, i int) *tensor.Tensor { return savedmodeltest.Rows(t, i, i+1) }
	squeeze := func(t *tensor.Tensor) *tensor.Tensor { r, _ := t.Reshaped(t.Shape()[1:]...); return r }

	cases := []struct {
		name, url, body string
		check           func(t *testing.T, m map[string]any)
	}{
		{"row format, named inputs, several outputs", smallHS.URL + "/v1/models/default:predict",
			fmt.Sprintf(`{"signature_name":"serving_default","instances":[{"x":%s,"k":%s},{"x":%s,"k":%s}]}`,
				rowJSON(x, 0), rowJSON(k, 0), rowJSON(x, 1), rowJSON(k, 1)),
			func(t *testing.T, m map[string]any) {
				preds := m["predictions"].([]any)
				if len(preds) != 2 {
					t.Fatalf("%d predictions", len(preds))
				}
				for i, p := range preds {
					obj := p.(map[string]any)
					checkValue(t, "y", obj["y"], squeeze(row(smallWant["y"], i)))
					checkValue(t, "k2", obj["k2"], squeeze(row(smallWant["k2"], i)))
				}
			}},
		{"columnar format, named inputs, several outputs", smallHS.URL + "/v1/models/default/versions/1:predict",
			fmt.Sprintf(`{"inputs":{"x":%s,"k":%s}}`, jsonOf(x), jsonOf(k)),
			func(t *testing.T, m map[string]any) {
				outs := m["outputs"].(map[string]any)
				checkValue(t, "y", outs["y"], smallWant["y"])
				checkValue(t, "k2", outs["k2"], smallWant["k2"])
			}},
		{"row format, bare values, single output", cnnHS.URL + "/v1/models/default:predict",
			fmt.Sprintf(`{"instances":[%s,%s,%s]}`, rowJSON(imgs, 0), rowJSON(imgs, 1), rowJSON(imgs, 2)),
			func(t *testing.T, m map[string]any) {
				for i, p := range m["predictions"].([]any) {
					checkValue(t, "logits", p, squeeze(row(cnnWant["logits"], i)))
				}
			}},
		{"row format, named single input", cnnHS.URL + "/v1/models/default:predict",
			fmt.Sprintf(`{"instances":[{"images":%s}]}`, rowJSON(imgs, 0)),
			func(t *testing.T, m map[string]any) {
				checkValue(t, "logits", m["predictions"].([]any)[0], squeeze(row(cnnWant["logits"], 0)))
			}},
		{"columnar format, bare tensor, single output", cnnHS.URL + "/v1/models/default:predict",
			fmt.Sprintf(`{"inputs":%s}`, jsonOf(imgs)),
			func(t *testing.T, m map[string]any) { checkValue(t, "logits", m["outputs"], cnnWant["logits"]) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, m := do(t, "POST", c.url, c.body)
			if code != 200 {
				t.Fatalf("status %d: %v", code, m)
			}
			c.check(t, m)
		})
	}
}

func TestPredictErrors(t *testing.T) {
	sm := built(t, small(1))
	_, hs := start(t, sm, Config{MaxBodyBytes: 4096})
	url := hs.URL + "/v1/models/default:predict"
	cases := []struct {
		name, body string
		code       int
		msgs       []string
	}{
		{"malformed JSON", `{"instances": [`, 400, []string{"JSON Parse error"}},
		{"not an object", `[1,2]`, 400, []string{"JSON Parse error"}},
		{"neither key", `{"foo": 1}`, 400, []string{"Missing 'instances' or 'inputs' key"}},
		{"both keys", `{"instances": [], "inputs": {}}`, 400, []string{"only one of"}},
		{"unknown signature", `{"signature_name": "classify", "instances": [{"x":[1,2,3],"k":1}]}`, 400, []string{`"classify"`}},
		{"empty instances", `{"instances": []}`, 400, []string{"empty"}},
		{"bare instances, two inputs", `{"instances": [[1,2,3]]}`, 400, []string{"2 inputs", "k, x"}},
		{"unknown input name", `{"instances": [{"x":[1,2,3],"k":1,"z":2}]}`, 400, []string{`unknown input "z"`}},
		{"missing input", `{"instances": [{"x":[1,2,3]}]}`, 400, []string{`missing input "k"`}},
		{"missing input, columnar", `{"inputs": {"x":[[1,2,3]]}}`, 400, []string{`missing input "k"`}},
		{"unknown input, columnar", `{"inputs": {"x":[[1,2,3]],"k":[1],"q":[1]}}`, 400, []string{`unknown input "q"`}},
		{"wrong shape", `{"instances": [{"x":[1,2],"k":1}]}`, 400, []string{`input "x"`, "[1,2] given", "[?,3] wanted"}},
		{"wrong shape, columnar", `{"inputs": {"x":[1,2,3],"k":[1]}}`, 400, []string{`input "x"`, "[3] given"}},
		{"wrong dtype", `{"instances": [{"x":[1,2,3],"k":1.5}]}`, 400, []string{`input "k"`, "1.5 is not an int32"}},
		{"string value", `{"instances": [{"x":[1,"a",3],"k":1}]}`, 400, []string{`input "x"`, "a string is not a number"}},
		{"ragged instances", `{"instances": [{"x":[1,2,3],"k":1},{"x":[1,2],"k":1}]}`, 400, []string{`input "x"`, "ragged"}},
		{"ragged nesting", `{"inputs": {"x":[[1,2,3],4],"k":[1,2]}}`, 400, []string{`input "x"`, "ragged"}},
		{"mixed instances", `{"instances": [{"x":[1,2,3],"k":1}, 5]}`, 400, []string{"instance 1"}},
		{"out of range", `{"instances": [{"x":[1,2,3e50],"k":1}]}`, 400, []string{`input "x"`, "range of float32"}},
		{"body too large", `{"instances": [` + strings.Repeat(`{"x":[1,2,3],"k":1},`, 300) + `{"x":[1,2,3],"k":1}]}`, 413, []string{"larger than the limit of 4096 bytes"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, m := do(t, "POST", url, c.body)
			msg, _ := m["error"].(string)
			if code != c.code || len(m) != 1 {
				t.Fatalf("status %d %v, want %d with only an error", code, m, c.code)
			}
			for _, want := range c.msgs {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not mention %q", msg, want)
				}
			}
		})
	}
}

// TestConcurrentRequests sends many concurrent single-row requests, batching
// on and off: each client must get exactly its own rows, bit for bit.
func TestConcurrentRequests(t *testing.T) {
	ctx := context.Background()
	m := built(t, mlp)
	for _, batching := range []bool{true, false} {
		t.Run(fmt.Sprintf("batching=%v", batching), func(t *testing.T) {
			s, hs := start(t, m, Config{DisableBatching: !batching, BatchTimeout: 5 * time.Millisecond, MaxBatchSize: 8})
			const clients, each = 16, 6
			imgs := savedmodeltest.Images(clients*each, 11)
			want, err := m.Run(ctx, map[string]*tensor.Tensor{"images": imgs})
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range each {
						r := c*each + i
						n := 1 + r%2 // one or two rows per request
						if r+n > clients*each {
							n = 1
						}
						body := `{"instances":[` + rowJSON(imgs, r)
						if n == 2 {
							body += "," + rowJSON(imgs, r+1)
						}
						code, resp := do(t, "POST", hs.URL+"/v1/models/default:predict", body+"]}")
						if code != 200 {
							t.Errorf("client %d: status %d: %v", c, code, resp)
							return
						}
						preds := resp["predictions"].([]any)
						if len(preds) != n {
							t.Errorf("client %d: %d predictions for %d rows", c, len(preds), n)
							return
						}
						for j, p := range preds {
							obj := p.(map[string]any)
							probs, _ := savedmodeltest.Rows(want["probabilities"], r+j, r+j+1).Reshaped(10)
							checkValue(t, "probabilities", obj["probabilities"], probs)
							cls, _ := savedmodeltest.Rows(want["classes"], r+j, r+j+1).Reshaped()
							checkValue(t, "classes", obj["classes"], cls)
						}
					}
				}()
			}
			wg.Wait()
			if sv := s.acquire(); sv != nil {
				if sv.batcher != nil {
					t.Logf("%d merged batches", sv.batcher.merged.Load())
				} else if batching {
					t.Error("batching is on but the servable has no batcher")
				}
				sv.release()
			}
		})
	}
}

// TestBatcherMergesAndSplits drives a batcher directly: requests that
// arrive together are merged into one Predict call and each gets its rows.
func TestBatcherMergesAndSplits(t *testing.T) {
	ctx := context.Background()
	p := loadedMLP(t)
	b := newBatcher(p, 6, time.Minute, 1, nil)
	imgs := savedmodeltest.Images(6, 3)
	want, err := p.Predict(ctx, map[string]*tensor.Tensor{"images": imgs})
	if err != nil {
		t.Fatal(err)
	}
	// Three requests of 1, 2 and 3 rows: the batch fills to 6 rows and
	// closes without waiting for the (one-minute) timeout.
	b.incoming.Add(3)
	var wg sync.WaitGroup
	for _, r := range [][2]int{{0, 1}, {1, 3}, {3, 6}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := map[string]*tensor.Tensor{"images": savedmodeltest.Rows(imgs, r[0], r[1])}
			key, rows, _ := batchKey(in, []string{"images"})
			out, err := b.submit(ctx, &batchItem{inputs: in, rows: rows, key: key, done: make(chan batchResult, 1)})
			if err != nil {
				t.Error(err)
				return
			}
			for name, w := range want {
				if w := savedmodeltest.Rows(w, r[0], r[1]); string(out[name].RawBytes()) != string(w.RawBytes()) || out[name].Shape()[0] != r[1]-r[0] {
					t.Errorf("rows %v of %q differ", r, name)
				}
			}
		}()
	}
	wg.Wait()
	if got := b.merged.Load(); got != 1 {
		t.Errorf("%d merged batches, want 1", got)
	}
	if n := b.incoming.Load(); n != 0 {
		t.Errorf("incoming = %d after all requests, want 0", n)
	}
}

// TestBatcherQueuesCancelsAndHandsOff drives a batcher whose one thread is
// busy: a request cancelled while queued leaves the queue; the requests
// queued behind it form one batch when the thread is passed on.
func TestBatcherQueuesCancelsAndHandsOff(t *testing.T) {
	ctx := context.Background()
	p := loadedMLP(t)
	b := newBatcher(p, 64, time.Minute, 1, nil)
	imgs := savedmodeltest.Images(3, 4)
	want, err := p.Predict(ctx, map[string]*tensor.Tensor{"images": imgs})
	if err != nil {
		t.Fatal(err)
	}
	item := func(r int) *batchItem {
		in := map[string]*tensor.Tensor{"images": savedmodeltest.Rows(imgs, r, r+1)}
		key, rows, _ := batchKey(in, []string{"images"})
		return &batchItem{inputs: in, rows: rows, key: key, done: make(chan batchResult, 1)}
	}
	queued := func(n int) bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.queue) == n
	}
	b.mu.Lock()
	b.running = 1 // the one thread is busy
	b.mu.Unlock()

	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	b.incoming.Add(1)
	go func() { _, err := b.submit(cctx, item(0)); errc <- err }()
	for !queued(1) {
		runtime_Gosched()
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled queued request returned %v", err)
	}
	if !queued(0) {
		t.Fatal("the cancelled request is still queued")
	}

	var wg sync.WaitGroup
	b.incoming.Add(2)
	for r := 1; r <= 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := b.submit(ctx, item(r))
			if err != nil {
				t.Error(err)
				return
			}
			for name, w := range want {
				if w := savedmodeltest.Rows(w, r, r+1); !bytes.Equal(out[name].RawBytes(), w.RawBytes()) {
					t.Errorf("row %d of %q differs", r, name)
				}
			}
		}()
	}
	for !queued(2) {
		runtime_Gosched()
	}
	b.mu.Lock()
	b.running-- // the busy batch ends: its thread goes to the oldest request
	b.handOff()
	b.mu.Unlock()
	wg.Wait()
	if got := b.merged.Load(); got != 1 {
		t.Errorf("%d merged batches, want 1", got)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running != 0 || len(b.queue) != 0 || b.incoming.Load() != 0 {
		t.Errorf("after the batch: %d threads held, %d queued, %d incoming", b.running, len(b.queue), b.incoming.Load())
	}
}

// TestReloadUnderLoad writes a new version while clients keep sending: no
// request fails, and requests sent after Poll returns see the new version.
func TestReloadUnderLoad(t *testing.T) {
	v1, v2 := built(t, small(1)), built(t, small(2))
	base := t.TempDir()
	if _, _, err := savedmodel.WriteVersion(base, v1.Model); err != nil {
		t.Fatal(err)
	}
	s, hs := start(t, nil, Config{BaseDir: base})
	oldSv := s.acquire()
	oldSv.release()
	url := hs.URL + "/v1/models/default:predict"
	body := `{"instances":[{"x":[1,0,0],"k":1}]}`
	// y = x·W + b: 1.5 with version 1 (b = 0.5), 2.5 with version 2.
	yOf := func(m map[string]any) string {
		return fmt.Sprint(m["predictions"].([]any)[0].(map[string]any)["y"].([]any)[0])
	}
	var switched atomic.Bool
	stop := make(chan struct{})
	var sawNew atomic.Int64
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				after := switched.Load()
				code, m := do(t, "POST", url, body)
				if code != 200 {
					t.Errorf("client %d: status %d during a reload: %v", c, code, m)
					return
				}
				y := yOf(m)
				switch {
				case y == "2.5":
					sawNew.Add(1)
				case y == "1.5" && !after:
				default:
					t.Errorf("client %d: y = %s (switched before the request: %v)", c, y, after)
					return
				}
			}
		}()
	}
	// A half-written version 2 is ignored...
	if err := os.Mkdir(filepath.Join(base, "2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := s.Poll(context.Background()); err != nil || s.Version() != 1 {
		t.Fatalf("Poll with a half-written version 2: %v, serving %d", err, s.Version())
	}
	// ... and a complete version 3 is taken.
	if v, _, err := savedmodel.WriteVersion(base, v2.Model); err != nil || v != 3 {
		t.Fatalf("WriteVersion = %d, %v", v, err)
	}
	if err := s.Poll(context.Background()); err != nil || s.Version() != 3 {
		t.Fatalf("Poll: %v, serving %d, want 3", err, s.Version())
	}
	switched.Store(true)
	deadline := time.Now().Add(10 * time.Second)
	for sawNew.Load() < 20 && time.Now().Before(deadline) && !t.Failed() {
		runtime_Gosched()
	}
	close(stop)
	wg.Wait()
	if sawNew.Load() < 20 {
		t.Errorf("only %d requests saw the new version", sawNew.Load())
	}
	select {
	case <-oldSv.closed:
	case <-time.After(10 * time.Second):
		t.Error("the old version was not closed after its requests ended")
	}
	if code, m := do(t, "GET", hs.URL+"/v1/models/default/versions/1", ""); code != 404 {
		t.Errorf("status of the old version: %d %v, want 404", code, m)
	}
}

func TestNewWithoutVersion(t *testing.T) {
	base := t.TempDir()
	os.Mkdir(filepath.Join(base, "1"), 0o755) // half-written
	_, err := New(Config{BaseDir: base, Logger: quiet})
	if !errors.Is(err, ErrNoVersion) || !strings.Contains(err.Error(), base) {
		t.Errorf("New on a base without a complete version: %v", err)
	}
	if _, err := New(Config{BaseDir: filepath.Join(base, "missing"), Logger: quiet}); !errors.Is(err, savedmodel.ErrNotFound) {
		t.Errorf("New on a missing base: %v", err)
	}
	if _, err := New(Config{BaseDir: base, MaxBatchSize: -1}); err == nil || !strings.Contains(err.Error(), "MaxBatchSize") {
		t.Errorf("New with MaxBatchSize -1: %v", err)
	}
}

func TestServeShutsDownGracefully(t *testing.T) {
	b := built(t, small(1))
	base := t.TempDir()
	if _, _, err := savedmodel.WriteVersion(base, b.Model); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{BaseDir: base, Logger: quiet, PollInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := netListen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	url := "http://" + ln.Addr().String()
	if code, m := do(t, "POST", url+"/v1/models/default:predict", `{"inputs":{"x":[[1,1,1]],"k":[2]}}`); code != 200 {
		t.Fatalf("predict: %d %v", code, m)
	}
	// The poll loop picks up a new version by itself.
	if _, _, err := savedmodel.WriteVersion(base, b.Model); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Version() != 2 && time.Now().Before(deadline) {
		runtime_Gosched()
	}
	if s.Version() != 2 {
		t.Errorf("the poll loop did not load version 2")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after its context was cancelled")
	}
}

// loadedMLP writes the test MLP's export and loads it; it is closed at the
// end of the test.
func loadedMLP(t *testing.T) *savedmodel.Predictor {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "1")
	if err := savedmodel.Write(dir, built(t, mlp).Model); err != nil {
		t.Fatal(err)
	}
	p, err := savedmodel.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// scrape reads the server's metrics: the value of each counter and gauge
// series and the count and sum of each histogram, keyed by name and labels as the text format
// writes them.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			key := name + "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.Counter != nil:
				got[key] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				got[key] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				got[key] = float64(m.GetHistogram().GetSampleCount())
				got[key+"_sum"] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return got
}

// TestMetrics: the server counts its predict requests by outcome under TF
// Serving's names, times them, their runs and their waits for a batch, and
// counts no model name but the one it serves.
func TestMetrics(t *testing.T) {
	m := built(t, mlp)
	for _, batching := range []bool{true, false} {
		t.Run(fmt.Sprintf("batching=%v", batching), func(t *testing.T) {
			_, hs := start(t, m, Config{DisableBatching: !batching, ModelName: "mnist"})
			imgs := savedmodeltest.Images(4, 3)
			const good = 4
			for i := range good {
				if code, resp := do(t, "POST", hs.URL+"/v1/models/mnist:predict", `{"instances":[`+rowJSON(imgs, i)+`]}`); code != 200 {
					t.Fatalf("status %d: %v", code, resp)
				}
			}
			for _, r := range []struct {
				method, path, body string
				code               int
			}{
				{"POST", "/v1/models/mnist:predict", `{"instances": [`, 400},
				{"POST", "/v1/models/mnist:predict", `{"instances": [[1, 2]]}`, 400},
				{"GET", "/v1/models/mnist:predict", "", 405},
				{"POST", "/v1/models/mnist/versions/9:predict", `{"instances": [[1]]}`, 404},
				{"POST", "/v1/models/other:predict", `{"instances": [[1]]}`, 404}, // not counted
				{"GET", "/v1/models/mnist", "", 200},                              // not a predict
			} {
				if code, resp := do(t, r.method, hs.URL+r.path, r.body); code != r.code {
					t.Fatalf("%s %s: status %d, want %d: %v", r.method, r.path, code, r.code, resp)
				}
			}
			got := scrape(t, hs.URL+DefaultMetricsPath)
			for key, want := range map[string]float64{
				RequestCount + "{model_name=mnist,status=OK}":                     good,
				RequestCount + "{model_name=mnist,status=INVALID_ARGUMENT}":       2,
				RequestCount + "{model_name=mnist,status=UNIMPLEMENTED}":          1,
				RequestCount + "{model_name=mnist,status=NOT_FOUND}":              1,
				RequestLatency + "{API=predict,entrypoint=REST,model_name=mnist}": good + 4,
			} {
				if got[key] != want {
					t.Errorf("%s = %v, want %v", key, got[key], want)
				}
			}
			runs := got[RuntimeLatency+"{API=predict,model_name=mnist,runtime=distflow}"]
			if runs < 1 || runs > good || !(got[RuntimeLatency+"{API=predict,model_name=mnist,runtime=distflow}_sum"] > 0) {
				t.Errorf("%d runs of the model timed, want 1 to %d, taking some time", int(runs), good)
			}
			queued := got[QueuingLatency+"{thread_pool_name=mnist}"]
			if batching && queued != good || !batching && queued != 0 {
				t.Errorf("%v waits for a batch timed, want %d with batching, none without", queued, good)
			}
			for key := range got {
				if strings.Contains(key, "model_name=other") {
					t.Errorf("a series for a model not served: %s", key)
				}
			}
			if _, ok := got["go_goroutines{}"]; !ok {
				t.Error("no Go runtime series")
			}
		})
	}
	t.Run("disabled", func(t *testing.T) {
		_, hs := start(t, m, Config{DisableMetrics: true})
		if code, _ := do(t, "GET", hs.URL+DefaultMetricsPath, ""); code != 404 {
			t.Errorf("metrics path answered %d with metrics off, want 404", code)
		}
	})
	t.Run("path", func(t *testing.T) {
		_, hs := start(t, m, Config{MetricsPath: "/metrics"})
		if got := scrape(t, hs.URL+"/metrics"); len(got) == 0 {
			t.Error("no series at /metrics")
		}
		if _, err := New(Config{BaseDir: t.TempDir(), MetricsPath: "/v1/models/x"}); err == nil || !strings.Contains(err.Error(), "MetricsPath") {
			t.Errorf("a metrics path under /v1/: %v", err)
		}
	})
}

func TestStatusNames(t *testing.T) {
	for _, c := range []struct {
		status int
		cause  error
		want   string
	}{
		{200, nil, "OK"}, {400, nil, "INVALID_ARGUMENT"}, {404, nil, "NOT_FOUND"}, {413, nil, "RESOURCE_EXHAUSTED"},
		{503, nil, "UNAVAILABLE"}, {405, nil, "UNIMPLEMENTED"}, {500, nil, "INTERNAL"},
		{500, fmt.Errorf("run: %w", context.DeadlineExceeded), "DEADLINE_EXCEEDED"},
		{500, context.Canceled, "CANCELLED"},
	} {
		if got := statusName(c.status, c.cause); got != c.want {
			t.Errorf("statusName(%d, %v) = %s, want %s", c.status, c.cause, got, c.want)
		}
	}
}

// TestModels serves two models from one address: each answers under its
// name with its own signature, an unknown name is TF Serving's 404, the
// metrics count each model under its name, and a model's new version is
// picked up while the other is untouched.
func TestModels(t *testing.T) {
	sm, m := built(t, small(1)), built(t, mlp)
	smallDir, mlpDir := t.TempDir(), t.TempDir()
	for dir, b := range map[string]*savedmodeltest.Built{smallDir: sm, mlpDir: m} {
		if _, _, err := savedmodel.WriteVersion(dir, b.Model); err != nil {
			t.Fatal(err)
		}
	}
	models, err := NewModels(ModelsConfig{Models: []Config{
		{ModelName: "small", BaseDir: smallDir, Logger: quiet, PollInterval: -1},
		{ModelName: "mnist", BaseDir: mlpDir, Logger: quiet, PollInterval: -1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(models)
	t.Cleanup(func() { hs.Close(); models.Close() })

	imgs := savedmodeltest.Images(1, 3)
	if code, resp := do(t, "POST", hs.URL+"/v1/models/mnist:predict", `{"instances":[`+rowJSON(imgs, 0)+`]}`); code != 200 {
		t.Errorf("mnist: %d %v", code, resp)
	}
	if code, resp := do(t, "POST", hs.URL+"/v1/models/small:predict", `{"instances":[{"x":[1,2,3],"k":1}]}`); code != 200 {
		t.Errorf("small: %d %v", code, resp)
	}
	if code, resp := do(t, "GET", hs.URL+"/v1/models/small/metadata", ""); code != 200 || !strings.Contains(fmt.Sprint(resp), "small") {
		t.Errorf("small's metadata: %d %v", code, resp)
	}
	if code, resp := do(t, "POST", hs.URL+"/v1/models/other:predict", `{"instances":[[1]]}`); code != 404 || !strings.Contains(fmt.Sprint(resp), "Latest(other)") {
		t.Errorf("an unknown model: %d %v", code, resp)
	}
	if code, _ := do(t, "GET", hs.URL+"/v2/x", ""); code != 404 {
		t.Errorf("a malformed path: %d", code)
	}
	got := scrape(t, hs.URL+DefaultMetricsPath)
	for _, name := range []string{"mnist", "small"} {
		if n := got[RequestCount+"{model_name="+name+",status=OK}"]; n != 1 {
			t.Errorf("%s: %v requests counted, want 1", name, n)
		}
	}
	for key := range got {
		if strings.Contains(key, "model_name=other") {
			t.Errorf("a series for a model not served: %s", key)
		}
	}
	// A second version of small, polled: mnist stays at 1.
	if _, _, err := savedmodel.WriteVersion(smallDir, sm.Model); err != nil {
		t.Fatal(err)
	}
	if err := models.Server("small").Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v, w := models.Server("small").Version(), models.Server("mnist").Version(); v != 2 || w != 1 {
		t.Errorf("versions small %d, mnist %d; want 2 and 1", v, w)
	}
	// Two models of one name, or a missing directory, are refused by name.
	for _, c := range []ModelsConfig{
		{Models: []Config{{ModelName: "a", BaseDir: smallDir, Logger: quiet}, {ModelName: "a", BaseDir: mlpDir, Logger: quiet}}},
		{Models: []Config{{ModelName: "a", BaseDir: smallDir, Logger: quiet}, {ModelName: "b", BaseDir: filepath.Join(smallDir, "none"), Logger: quiet}}},
		{},
	} {
		if _, err := NewModels(c); err == nil {
			t.Errorf("%+v: accepted", c)
		}
	}
}
