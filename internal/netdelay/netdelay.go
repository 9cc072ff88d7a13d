// Package netdelay is a TCP proxy that adds a fixed delay to every byte in
// each direction, without limiting throughput: the latency half of the
// shaped-network test bed (scripts/netbed.sh), whose kernel has tc tbf for
// bandwidth but no netem for delay.
//
//	lis, _ := net.Listen("tcp", "10.77.0.11:2222")
//	err := netdelay.Serve(ctx, lis, "127.0.0.1:2223", 250*time.Microsecond)
//
// A byte read at time t is written at t+Delay; reading goes on meanwhile,
// so a stream keeps its rate (up to MaxBuffered bytes in flight per
// direction, after which the proxy stops reading and TCP's flow control
// pushes back on the sender).
package netdelay

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"
)

// MaxBuffered bounds the bytes the proxy holds per direction of a
// connection (chunks of up to chunkSize).
const MaxBuffered = 8 << 20

const chunkSize = 64 << 10

// Serve accepts connections on lis until ctx ends, connects each to target
// and copies both ways, each byte delayed by delay. It closes lis and every
// connection when ctx ends and returns nil then; it returns an accept error
// otherwise. delay must not be negative.
func Serve(ctx context.Context, lis net.Listener, target string, delay time.Duration) error {
	return serve(ctx, lis, func(net.Conn) (string, error) { return target, nil }, &net.Dialer{}, delay)
}

// ServeTransparent is Serve for the connections that a firewall rule of
// the host redirected to lis (nftables' or iptables' redirect in the nat
// output hook): each goes on to the address its client dialled (Linux's
// SO_ORIGINAL_DST), from a socket marked with mark, which the rule must
// leave alone (meta mark != MARK), or the proxy would redirect itself.
// Every TCP connection a host makes then gets the delay, whatever program
// makes it and on whatever port: PyTorch's gloo as well as distflow.
func ServeTransparent(ctx context.Context, lis net.Listener, mark int, delay time.Duration) error {
	if errTransparent != nil {
		lis.Close()
		return errTransparent
	}
	return serve(ctx, lis, originalDst, markedDialer(mark), delay)
}

// serve is Serve with target(c) the address to connect c to, dialled by d.
func serve(ctx context.Context, lis net.Listener, target func(net.Conn) (string, error), d *net.Dialer, delay time.Duration) error {
	if delay < 0 {
		lis.Close()
		return fmt.Errorf("netdelay: delay %v: must not be negative", delay)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { <-ctx.Done(); lis.Close() }()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := lis.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("netdelay: accepting on %s: %w", lis.Addr(), err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			to, err := target(c)
			if err != nil {
				return
			}
			proxy(ctx, c, d, to, delay)
		}()
	}
}

// proxy serves one connection until both directions end or ctx does.
func proxy(ctx context.Context, client net.Conn, d *net.Dialer, target string, delay time.Duration) {
	server, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		// Reset the client's connection, as close to the refusal it
		// would have had without the proxy as an accepted one can be.
		if tc, ok := client.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		return
	}
	defer server.Close()
	stop := context.AfterFunc(ctx, func() { client.Close(); server.Close() })
	defer stop()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); pipe(server, client, delay) }()
	go func() { defer wg.Done(); pipe(client, server, delay) }()
	wg.Wait()
}

type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst, each chunk written delay after it was read; at
// src's end it half-closes dst so that the peer sees the end too.
func pipe(dst, src net.Conn, delay time.Duration) {
	ch := make(chan chunk, MaxBuffered/chunkSize)
	free := make(chan []byte, MaxBuffered/chunkSize)
	go func() {
		defer close(ch)
		for {
			var b []byte
			select {
			case b = <-free:
			default:
				b = make([]byte, chunkSize)
			}
			n, err := src.Read(b[:cap(b)])
			if n > 0 {
				ch <- chunk{b[:n], time.Now().Add(delay)}
			}
			if err != nil {
				return
			}
		}
	}()
	lockSleeper()
	failed := false
	for c := range ch {
		if failed {
			continue // drain, so that the reader ends
		}
		wait(c.due)
		if _, err := dst.Write(c.b); err != nil {
			failed = true
			src.Close()
			continue
		}
		select {
		case free <- c.b:
		default:
		}
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok && !failed {
		cw.CloseWrite()
	}
}

// wait returns at t. Go's timers cannot wait less than a millisecond on an
// idle process (the runtime's poller rounds shorter waits up), as much as
// the delays this proxy adds, and spinning costs a core the bed's tasks
// need: sleep in the kernel instead (sleepFor; a high-resolution timer on
// Linux, late by its slack, about 50 us).
func wait(t time.Time) {
	if d := time.Until(t); d > 0 {
		sleepFor(d)
	}
}
