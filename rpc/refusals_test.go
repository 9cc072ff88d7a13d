package rpc

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distflow/distflow/internal/testlog"
	"github.com/distflow/distflow/rpc/rpctest"
)

// fakeLimiter is a limiter on a clock that the test moves, whose
// scheduled summaries the test runs (fire).
type fakeLimiter struct {
	*refusalLimiter
	clock   time.Time
	pending []func()
}

func newFakeLimiter() *fakeLimiter {
	f := &fakeLimiter{refusalLimiter: newRefusalLimiter(), clock: time.Unix(1_700_000_000, 0)}
	f.after = func(d time.Duration, fn func()) { f.pending = append(f.pending, fn) }
	f.now = func() time.Time { return f.clock }
	return f
}

func (f *fakeLimiter) fire() {
	p := f.pending
	f.pending = nil
	for _, fn := range p {
		fn()
	}
}

func lines(s string) []string {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// TestRefusalsRateLimited: a refusal that repeats from one host, whatever
// its port, is logged refusalBurst times per window; a different reason
// or host is logged at once; at the window's end one line counts those
// not logged.
func TestRefusalsRateLimited(t *testing.T) {
	var buf testlog.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	l := newFakeLimiter()
	for i := range 1000 {
		// The error names the client's ephemeral port, as a reset does.
		port := 40000 + i
		err := fmt.Errorf("read tcp 127.0.0.1:2222->127.0.0.1:%d: read: connection reset by peer", port)
		l.log(log, l.clock.Add(time.Duration(i)*time.Millisecond), "rpc: refused connection", fmt.Sprintf("127.0.0.1:%d", port), err)
	}
	bad := errors.New("remote error: tls: unknown certificate authority")
	l.log(log, l.clock.Add(time.Second), "rpc: refused connection", "127.0.0.1:40001", bad)
	l.log(log, l.clock.Add(time.Second), "rpc: refused connection", "127.0.0.2:40000", bad)
	if got := lines(buf.String()); len(got) != refusalBurst+2 {
		t.Fatalf("logged %d lines, want %d (the burst, another reason, another host):\n%s", len(got), refusalBurst+2, buf.String())
	}
	l.clock = l.clock.Add(refusalWindow)
	l.fire()
	got := lines(buf.String())
	if len(got) != refusalBurst+3 {
		t.Fatalf("logged %d lines after the window, want %d (with the summary):\n%s", len(got), refusalBurst+3, buf.String())
	}
	last := got[len(got)-1]
	if want := fmt.Sprintf("count=%d", 1000-refusalBurst); !strings.Contains(last, "refusals not logged") || !strings.Contains(last, want) || !strings.Contains(last, "hosts=1") {
		t.Errorf("the summary does not say %s of 1 host: %s", want, last)
	}
	// The next window logs again.
	l.log(log, l.clock.Add(time.Second), "rpc: refused connection", "127.0.0.1:50000", errors.New("read tcp 127.0.0.1:2222->127.0.0.1:50000: read: connection reset by peer"))
	if got := lines(buf.String()); len(got) != refusalBurst+4 {
		t.Errorf("a refusal of the next window was not logged:\n%s", buf.String())
	}
}

// TestRefusalsManyHosts: refusals from many addresses, each with a reason
// of its own (a self-signed certificate's subject is the client's
// choice), are logged refusalAllBurst times per window in all.
func TestRefusalsManyHosts(t *testing.T) {
	var buf testlog.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	l := newFakeLimiter()
	const n = 10_000
	for i := range n {
		remote := fmt.Sprintf("10.%d.%d.%d:%d", i>>16&255, i>>8&255, i&255, 1024+i)
		err := fmt.Errorf("x509: certificate signed by unknown authority (candidate %q)", strings.Repeat("x", i%97))
		l.log(log, l.clock, "rpc: refused connection", remote, err)
	}
	l.clock = l.clock.Add(refusalWindow)
	l.fire()
	got := lines(buf.String())
	if len(got) != refusalAllBurst+1 {
		t.Fatalf("%d refusals from %d hosts: logged %d lines, want %d", n, n, len(got), refusalAllBurst+1)
	}
	if want := fmt.Sprintf("count=%d", n-refusalAllBurst); !strings.Contains(got[len(got)-1], want) {
		t.Errorf("the summary does not say %s: %s", want, got[len(got)-1])
	}
	if k := len(l.keys); k > maxRefusalKeys {
		t.Errorf("the limiter holds %d keys, more than %d", k, maxRefusalKeys)
	}
}

// TestRefusedConnectionsBounded: thousands of connections that a TLS
// server refuses at the handshake (each from a new port) write a bounded
// number of lines.
func TestRefusedConnectionsBounded(t *testing.T) {
	var buf testlog.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	srvTLS, _ := rpctest.SelfSignedTLS(t)
	s := NewServer(Options{TLS: srvTLS, Logger: log})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(lis)
	defer s.Stop()

	const n = 2000
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, err := net.Dial("tcp", lis.Addr().String())
			if err != nil {
				t.Error(err)
				return
			}
			// The start of a ClientHello, then a reset: the server's
			// error names this connection's port.
			c.Write([]byte{0x16, 0x03, 0x01, 0x01, 0x00, 0x01})
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
		})
	}
	wg.Wait()
	// Every refusal is either a line or counted in the summary to come.
	accounted := func() int {
		refusals.mu.Lock()
		defer refusals.mu.Unlock()
		hidden := 0
		if tot := refusals.totals[log]; tot != nil {
			hidden = tot.hidden
		}
		return hidden + strings.Count(buf.String(), "rpc: refused connection")
	}
	for deadline := time.Now().Add(30 * time.Second); accounted() < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d refusals accounted for after 30 s", accounted(), n)
		}
	}
	if got := strings.Count(buf.String(), "\n"); got > refusalBurst {
		t.Errorf("%d refused connections wrote %d lines, want at most %d:\n%s", n, got, refusalBurst, buf.String())
	}
}
