// Command netdelay is a TCP proxy that delays every byte by a fixed time in
// each direction (package internal/netdelay), for the shaped-network test
// bed: scripts/netbed.sh runs one in each task's network namespace.
//
//	netdelay --listen 10.77.0.11:2222 --target 127.0.0.1:2223 --delay 250us
//
// or, as a transparent proxy for every TCP connection that a host's nat
// rule redirects to it (each goes on to the address its client dialled,
// from sockets marked 1, which the rule leaves alone):
//
//	nft add rule ip netbed out ip daddr 10.77.0.0/24 meta l4proto tcp meta mark != 1 redirect to :7777
//	netdelay --listen 127.0.0.1:7777 --transparent --mark 1 --delay 250us
//
// It serves until SIGINT or SIGTERM. To measure a link's round trip (the
// test bed has no ping): an echo server and a client that prints the
// median of 1-byte round trips in microseconds,
//
//	netdelay --echo 127.0.0.1:7
//	netdelay --ping 10.77.0.11:7 --count 200
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/distflow/distflow/internal/netdelay"
)

func main() {
	listen := flag.String("listen", "", "address to accept connections on (host:port)")
	target := flag.String("target", "", "address to connect each accepted connection to")
	transparent := flag.Bool("transparent", false, "connect each accepted connection to the address its client dialled before a nat redirect (Linux; instead of --target)")
	mark := flag.Int("mark", 1, "with --transparent: the firewall mark of the proxy's own connections, which the redirect rule must leave alone")
	delay := flag.Duration("delay", 0, "one-way delay added in each direction (a round trip gains twice this)")
	echo := flag.String("echo", "", "serve TCP echo on this address instead")
	ping := flag.String("ping", "", "measure the round trip to this TCP echo address and print its median in microseconds")
	count := flag.Int("count", 100, "round trips for --ping")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch {
	case *echo != "":
		fail(serveEcho(ctx, *echo))
		return
	case *ping != "":
		us, err := medianRTT(*ping, *count)
		fail(err)
		fmt.Println(us)
		return
	}
	if *listen == "" || (*target == "") == !*transparent || *delay < 0 || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "netdelay: want --listen HOST:PORT, one of --target HOST:PORT and --transparent, [--delay D >= 0] and no arguments")
		os.Exit(2)
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "netdelay:", err)
		os.Exit(1)
	}
	serve := func() error { return netdelay.Serve(ctx, lis, *target, *delay) }
	if *transparent {
		serve = func() error { return netdelay.ServeTransparent(ctx, lis, *mark, *delay) }
	}
	if err := serve(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func fail(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "netdelay:", err)
		os.Exit(1)
	}
}

// serveEcho echoes every connection on addr until ctx ends.
func serveEcho(ctx context.Context, addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); lis.Close() }()
	for {
		c, err := lis.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go func() { io.Copy(c, c); c.Close() }()
	}
}

// medianRTT returns the median of n 1-byte round trips to an echo server,
// in microseconds.
func medianRTT(addr string, n int) (int64, error) {
	if n < 1 {
		return 0, fmt.Errorf("--count %d: want at least 1", n)
	}
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	b := []byte{1}
	rtts := make([]int64, 0, n)
	for range n {
		t0 := time.Now()
		if _, err := c.Write(b); err != nil {
			return 0, err
		}
		if _, err := io.ReadFull(c, b); err != nil {
			return 0, err
		}
		rtts = append(rtts, time.Since(t0).Microseconds())
	}
	slices.Sort(rtts)
	return rtts[n/2], nil
}
