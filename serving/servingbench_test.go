package serving

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distflow/distflow/savedmodel"
	"github.com/distflow/distflow/savedmodel/savedmodeltest"
	"github.com/distflow/distflow/tensor"
)

// BenchmarkServing measures the MLP (784-100-10) served one instance per
// request, at 1, 8 and 64 concurrent clients: in-process Predictor calls
// (the reference) and HTTP over 127.0.0.1 with batching on and off. It
// reports requests/s (= rows/s: one row per request), p50/p99 latency, the
// process's CPU time per request (server and clients) and, with batching,
// the mean number of requests per batch.
//
//	go test ./serving -run XXX -bench Serving -benchtime 2s
func BenchmarkServing(b *testing.B) {
	m, err := savedmodeltest.MLP(1)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	base := b.TempDir()
	_, dir, err := savedmodel.WriteVersion(base, m.Model)
	if err != nil {
		b.Fatal(err)
	}
	const distinct = 64
	imgs := savedmodeltest.Images(distinct, 1)
	bodies := make([]string, distinct)
	inputs := make([]map[string]*tensor.Tensor, distinct)
	for i := range bodies {
		bodies[i] = `{"instances":[` + string(appendRow(nil, imgs, i)) + `]}`
		inputs[i] = map[string]*tensor.Tensor{"images": savedmodeltest.Rows(imgs, i, i+1)}
	}
	for _, clients := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("inprocess/clients=%d", clients), func(b *testing.B) {
			p, err := savedmodel.Load(dir)
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			load(b, clients, func(i int) error {
				_, err := p.Predict(context.Background(), inputs[i%distinct])
				return err
			})
		})
		for _, batching := range []bool{true, false} {
			b.Run(fmt.Sprintf("http/batching=%v/clients=%d", batching, clients), func(b *testing.B) {
				s, err := New(Config{BaseDir: base, Logger: quiet, PollInterval: -1, DisableBatching: !batching})
				if err != nil {
					b.Fatal(err)
				}
				ln, err := netListen()
				if err != nil {
					b.Fatal(err)
				}
				hs := &http.Server{Handler: s}
				go hs.Serve(ln)
				defer func() { hs.Close(); s.Close() }()
				url := "http://" + ln.Addr().String() + "/v1/models/default:predict"
				client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}}
				defer client.CloseIdleConnections()
				defer func() {
					if sv := s.acquire(); sv != nil && sv.batcher != nil {
						if n := sv.batcher.batches.Load(); n > 0 {
							b.ReportMetric(float64(sv.batcher.requests.Load())/float64(n), "req/batch")
						}
						sv.release()
					}
				}()
				load(b, clients, func(i int) error {
					resp, err := client.Post(url, "application/json", strings.NewReader(bodies[i%distinct]))
					if err != nil {
						return err
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						return fmt.Errorf("status %d", resp.StatusCode)
					}
					return nil
				})
			})
		}
	}
}

// load runs b.N calls of f from `clients` goroutines and reports throughput
// and latency percentiles.
func load(b *testing.B, clients int, f func(i int) error) {
	var next atomic.Int64
	lat := make([][]time.Duration, clients)
	var wg sync.WaitGroup
	var failed atomic.Value
	b.ResetTimer()
	cpu0 := processCPU()
	start := time.Now()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				t0 := time.Now()
				if err := f(i); err != nil {
					failed.Store(err)
					return
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := processCPU() - cpu0
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	pct := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))].Microseconds()) }
	rps := float64(b.N) / elapsed.Seconds()
	b.ReportMetric(rps, "req/s")
	b.ReportMetric(rps, "rows/s")
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	if cpu > 0 {
		// CPU of the whole process (clients included) per request: what
		// bounds throughput on a saturated machine, and far less
		// sensitive than requests/s to other jobs sharing it.
		b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/req")
	}
}

// BenchmarkPredictRows measures one in-process Predict call of the MLP for
// batches of 1, 8 and 64 rows: what merging requests can save per row.
//
//	go test ./serving -run XXX -bench PredictRows
func BenchmarkPredictRows(b *testing.B) {
	m, err := savedmodeltest.MLP(1)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	_, dir, err := savedmodel.WriteVersion(b.TempDir(), m.Model)
	if err != nil {
		b.Fatal(err)
	}
	p, err := savedmodel.Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	for _, rows := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			in := map[string]*tensor.Tensor{"images": savedmodeltest.Images(rows, 1)}
			for b.Loop() {
				if _, err := p.Predict(context.Background(), in); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*rows), "µs/row")
		})
	}
}

// BenchmarkDecodeRequest decodes the benchmark's request body (one MLP
// instance, 784 floats) with the request decoder, in one pass (as bodies
// up to onePassMax are) and in two, and with the reference decoder
// (encoding/json's generic values).
func BenchmarkDecodeRequest(b *testing.B) {
	sig := savedmodel.Signature{Inputs: map[string]savedmodel.TensorInfo{
		"images": {Name: "images:0", DType: tensor.Float32, Shape: tensor.MakeShape(-1, 784)},
	}}
	body := []byte(`{"instances":[` + string(appendRow(nil, savedmodeltest.Images(1, 1), 0)) + `]}`)
	for _, c := range []struct {
		name   string
		decode func([]byte, savedmodel.Signature) (*request, error)
	}{
		{"onepass", decodeRequest},
		{"twopass", func(body []byte, sig savedmodel.Signature) (*request, error) {
			return decodeWith(body, sig, sig.InputNames(), false)
		}},
		{"general", decodeGeneral},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			cpu0 := processCPU()
			for b.Loop() {
				if _, err := c.decode(body, sig); err != nil {
					b.Fatal(err)
				}
			}
			if cpu := processCPU() - cpu0; cpu > 0 {
				// CPU time, far less sensitive than ns/op to other jobs
				// sharing the machine.
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			}
		})
	}
}
