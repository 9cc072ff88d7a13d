package serving

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distflow/distflow/savedmodel"
	"github.com/distflow/distflow/savedmodel/savedmodeltest"
	"github.com/distflow/distflow/tensor"
)

// allocated returns the bytes f allocates (runtime.MemStats.TotalAlloc: all
// of them, whether or not they are still held when f returns).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestDecoderMemoryBound: whatever the JSON, decoding a large body
// allocates at most 4 bytes per byte of body, all allocations counted
// (held or not): escapes, nesting, huge numbers and many small lists
// included. encoding/json's generic values took about 35.
func TestDecoderMemoryBound(t *testing.T) {
	const size = 4 << 20
	sig := func(dt tensor.DType, dims ...int) savedmodel.Signature {
		return savedmodel.Signature{Inputs: map[string]savedmodel.TensorInfo{"x": {Name: "x:0", DType: dt, Shape: tensor.MakeShape(dims...)}}}
	}
	// fill repeats elem, separated by commas, to about size bytes in all.
	fill := func(elem string, around int) string {
		return strings.TrimSuffix(strings.Repeat(elem+",", (size-around)/(len(elem)+1)), ",")
	}
	row := "[" + strings.TrimSuffix(strings.Repeat("0.123456,", 784), ",") + "]"
	cases := []struct {
		name string
		sig  savedmodel.Signature
		body string
		err  bool
	}{
		{"float32 rows, an escaped key", sig(tensor.Float32, -1, 784),
			`{"instan\u0063es":[` + fill(row, 20) + `]}`, false},
		{"float32 rows, an escape elsewhere", sig(tensor.Float32, -1, 784),
			`{"instances":[` + fill(row, 40) + `],"note":"\u0061"}`, false},
		{"int64 zeros", sig(tensor.Int64, -1),
			`{"inputs":[` + fill("0", 20) + `]}`, false},
		{"float64 zeros, named rows", sig(tensor.Float64, -1),
			`{"instances":[` + fill(`{"x":0}`, 20) + `]}`, false},
		{"many small lists", sig(tensor.Float32, -1, 1),
			`{"instances":[` + fill("[0]", 20) + `]}`, false},
		{"empty lists", sig(tensor.Float32, -1, 0),
			`{"instances":[` + fill("[]", 20) + `]}`, false},
		{"bools", sig(tensor.Bool, -1),
			`{"inputs":[` + fill("true", 20) + `]}`, false},
		{"huge numbers", sig(tensor.Float64, -1),
			`{"inputs":[` + fill("1."+strings.Repeat("0", 1<<16), 20) + `]}`, false},
		{"a huge number out of range", sig(tensor.Float32, -1),
			`{"inputs":[1` + strings.Repeat("0", size) + `]}`, true},
		{"deep nesting", sig(tensor.Float32, -1),
			`{"inputs":[1],"deep":` + strings.Repeat("[", 9990) + strings.Repeat("]", 9990) + `}`, false},
		{"long keys, invalid UTF-8", sig(tensor.Float32, -1),
			`{"inputs":[1],"` + strings.Repeat("\xff", size) + `":1}`, false},
		{"an unknown input with a long escaped name", sig(tensor.Float32, -1, 1),
			`{"instances":[{"` + strings.Repeat(`\u00ff`, size/6) + `":[1]}]}`, true},
		{"a ragged list at the end", sig(tensor.Float32, -1, 784),
			`{"instances":[` + fill(row, 20) + `,[1]]}`, true},
		{"a string at the end", sig(tensor.Float32, -1, 784),
			`{"instances":[` + fill(row, 40) + `,"` + strings.Repeat("a", 1000) + `"]}`, true},
		{"a syntax error at the end", sig(tensor.Float32, -1, 784),
			`{"instances":[` + fill(row, 20) + `]]`, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := []byte(c.body)
			var err error
			got := allocated(func() { _, err = decodeRequest(body, c.sig) })
			if (err != nil) != c.err {
				t.Fatalf("error %v, want an error: %v", err, c.err)
			}
			// The tensors' 4 bytes per byte at most (int64 zeros), and a
			// few hundred bytes: the request, its map, the tensors' headers.
			if limit := 4*uint64(len(body)) + 4096; got > limit {
				t.Errorf("decoding %d bytes allocated %d (%.1f per byte), want at most %d", len(body), got, float64(got)/float64(len(body)), limit)
			}
			t.Logf("%d bytes: %d allocated (%.2f per byte)", len(body), got, float64(got)/float64(len(body)))
		})
	}
}

// serveHTTP exports b as version 1 of a new base dir and serves it with
// Serve on a loopback port until the test ends; it returns the address.
func serveHTTP(t *testing.T, b *savedmodeltest.Built, cfg Config) string {
	t.Helper()
	cfg.BaseDir, cfg.Logger, cfg.PollInterval = t.TempDir(), quiet, -1
	if _, _, err := savedmodel.WriteVersion(cfg.BaseDir, b.Model); err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg)
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
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return ln.Addr().String()
}

// rawRequest opens a connection to addr and writes head (and nothing
// more); reads on it fail after guard, so that a test stuck on a server
// that holds the connection fails instead of hanging.
func rawRequest(t *testing.T, addr, head string, guard time.Duration) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetReadDeadline(time.Now().Add(guard))
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSlowClientsAreDropped: clients that send a body or a header too
// slowly are cut off after the read timeouts (the body's with a 408),
// while another client's predictions succeed.
func TestSlowClientsAreDropped(t *testing.T) {
	const timeout = 300 * time.Millisecond
	addr := serveHTTP(t, built(t, small(1)), Config{HTTP: HTTPConfig{ReadHeaderTimeout: timeout, ReadTimeout: timeout}})
	url := "http://" + addr + "/v1/models/default:predict"
	const guard = 20 * time.Second // far beyond the timeouts: a held connection fails the test

	start := time.Now()
	slowBody := rawRequest(t, addr, "POST /v1/models/default:predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"+`{"instances": [`, guard)
	slowHeader := rawRequest(t, addr, "POST /v1/models/default:predict HTTP/1.1\r\nHost: x\r\nContent-Le", guard)

	// Predictions succeed while the slow clients are held.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 10 {
				resp, err := http.Post(url, "application/json", strings.NewReader(`{"instances":[{"x":[1,2,3],"k":1}]}`))
				if err != nil {
					t.Error(err)
					return
				}
				msg, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Errorf("predict: %d %s", resp.StatusCode, msg)
					return
				}
			}
		})
	}

	br := bufio.NewReader(slowBody)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("slow body: no answer after %v: %v", time.Since(start), err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(msg), "too slowly") {
		t.Errorf("slow body: %d %s, want 408", resp.StatusCode, msg)
	}
	if d := time.Since(start); d < timeout {
		t.Errorf("slow body: cut off after %v, before the read timeout %v", d, timeout)
	}
	if rest, err := io.ReadAll(br); err != nil || len(rest) > 0 {
		t.Errorf("slow body: the connection is not closed after the answer: %q, %v", rest, err)
	}
	if _, err := io.ReadAll(slowHeader); err != nil {
		t.Errorf("slow header: the connection is not closed: %v", err)
	}
	if d := time.Since(start); d < timeout {
		t.Errorf("slow header: cut off after %v, before the read header timeout %v", d, timeout)
	}
	wg.Wait()
}

// TestHugeContentLengthRefusedAtOnce: a body announced over MaxBodyBytes
// is answered 413 before any of it is read, and the connection closed.
func TestHugeContentLengthRefusedAtOnce(t *testing.T) {
	addr := serveHTTP(t, built(t, small(1)), Config{})
	c := rawRequest(t, addr, fmt.Sprintf("POST /v1/models/default:predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", int64(8)<<30), 20*time.Second)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(msg), "larger than the limit of 33554432 bytes") {
		t.Errorf("%d %s, want 413", resp.StatusCode, msg)
	}
	if !resp.Close {
		t.Error("the answer does not close the connection")
	}
}

// TestHeaderAndIdleLimits: a header over MaxHeaderBytes is answered 431,
// and a kept-alive connection is closed after IdleTimeout without a request.
func TestHeaderAndIdleLimits(t *testing.T) {
	const idle = 200 * time.Millisecond
	addr := serveHTTP(t, built(t, small(1)), Config{HTTP: HTTPConfig{IdleTimeout: idle, MaxHeaderBytes: 1 << 10}})
	c := rawRequest(t, addr, "GET /v1/models/default HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", 8<<10)+"\r\n\r\n", 20*time.Second)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("large header: no answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("large header: status %d, want 431", resp.StatusCode)
	}

	c = rawRequest(t, addr, "GET /v1/models/default HTTP/1.1\r\nHost: x\r\n\r\n", 20*time.Second)
	br := bufio.NewReader(c)
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("status: no answer: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	answered := time.Now()
	if resp.StatusCode != 200 || resp.Close {
		t.Fatalf("status: %d, close %v; want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
	}
	if rest, err := io.ReadAll(br); err != nil || len(rest) > 0 {
		t.Errorf("idle connection: %q, %v; want it closed", rest, err)
	}
	if d := time.Since(answered); d < idle/2 {
		t.Errorf("idle connection closed after %v, before the idle timeout %v", d, idle)
	}
}
