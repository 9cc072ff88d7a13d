// Command netdelay is a TCP proxy that delays every byte by a fixed time in
// each direction (package internal/netdelay), for the shaped-network test
// bed: scripts/netbed.sh runs one in each task's network namespace.
//
//	netdelay --listen 10.77.0.11:2222 --target 127.0.0.1:2223 --delay 250us
//
// It serves until SIGINT or SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/distflow/distflow/internal/netdelay"
)

func main() {
	listen := flag.String("listen", "", "address to accept connections on (host:port)")
	target := flag.String("target", "", "address to connect each accepted connection to")
	delay := flag.Duration("delay", 0, "one-way delay added in each direction (a round trip gains twice this)")
	flag.Parse()
	if *listen == "" || *target == "" || *delay < 0 || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "netdelay: want --listen HOST:PORT --target HOST:PORT [--delay D >= 0] and no arguments")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "netdelay:", err)
		os.Exit(1)
	}
	if err := netdelay.Serve(ctx, lis, *target, *delay); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
