package netdelay_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/distflow/distflow/internal/netdelay"
)

// start runs an echo server and a proxy in front of it, on loopback.
func start(t *testing.T, delay time.Duration) (proxy, direct string) {
	t.Helper()
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { echo.Close() })
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- netdelay.Serve(ctx, lis, echo.Addr().String(), delay) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return lis.Addr().String(), echo.Addr().String()
}

// medianRTT is the median time of a one-byte round trip.
func medianRTT(t *testing.T, addr string, n int) time.Duration {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := []byte{1}
	var rtts []time.Duration
	for range n {
		t0 := time.Now()
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatal(err)
		}
		rtts = append(rtts, time.Since(t0))
	}
	sort.Slice(rtts, func(i, j int) bool { return rtts[i] < rtts[j] })
	return rtts[n/2]
}

// TestDelay: a round trip through the proxy takes twice its delay more
// than one without it.
func TestDelay(t *testing.T) {
	const delay = 2 * time.Millisecond
	proxy, direct := start(t, delay)
	base := medianRTT(t, direct, 50)
	got := medianRTT(t, proxy, 50)
	t.Logf("round trip: direct %v, through a %v proxy %v", base, delay, got)
	if got < 2*delay || got > 2*delay+base+3*time.Millisecond {
		t.Errorf("round trip through the proxy %v, want about %v (+ %v direct)", got, 2*delay, base)
	}
}

// TestStream: bytes arrive intact, in order, and a stream is not slowed to
// one chunk per delay (the delay is pipelined).
func TestStream(t *testing.T) {
	const delay = 20 * time.Millisecond
	proxy, _ := start(t, delay)
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := make([]byte, 8<<20)
	rand.Read(want)
	var got bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); io.Copy(&got, c) }()
	t0 := time.Now()
	if _, err := c.Write(want); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	wg.Wait()
	el := time.Since(t0)
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("echoed %d bytes, want the %d sent", got.Len(), len(want))
	}
	// 8 MiB is at least 128 chunks each way: one chunk per delay would
	// take 5 s; pipelined, it takes the delay twice plus the copying.
	t.Logf("8 MiB echoed through a %v proxy in %v", delay, el)
	if el < 2*delay || el > 1500*time.Millisecond {
		t.Errorf("8 MiB took %v: want the delay pipelined (about %v plus copying)", el, 2*delay)
	}
}

func TestNegativeDelay(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := netdelay.Serve(context.Background(), lis, "127.0.0.1:1", -time.Second); err == nil {
		t.Error("a negative delay was accepted")
	}
}
