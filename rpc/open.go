package rpc

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/master"
	"github.com/distflow/distflow/session"
)

// init makes session.Open accept "grpc://host:port" targets on loopback,
// in plaintext. Any other address needs the cluster's transport options,
// given by name through OpenSession: a plaintext session to a remote
// cluster would send its graph and tensors in the clear.
func init() {
	session.RegisterDialer("grpc", func(_ context.Context, target string) (master.Service, io.Closer, error) {
		addr := strings.TrimPrefix(target, "grpc://")
		if !loopbackAddr(addr) {
			return nil, nil, fmt.Errorf("rpc: %s is not a loopback address, and session.Open dials in plaintext: "+
				"use rpc.OpenSession with the cluster's client options (pki.Security.ClientOptions for a cluster with "+
				"certificates or a token; rpc.Options{} to ask for plaintext by name, for a cluster run with --insecure)", addr)
		}
		return DialMaster(target, Options{})
	})
}

// OpenSession is session.Open for a "grpc://host:port" target, dialled
// with opts (TLS, credentials, limits): the way to reach a cluster that is
// not on loopback.
//
//	opts, err := pki.Security{CertsDir: "certs"}.ClientOptions()
//	sess, err := rpc.OpenSession(ctx, "grpc://ps0.example:2222", g, opts)
func OpenSession(ctx context.Context, target string, g *graph.Graph, opts Options, sopts ...session.Option) (*session.Session, error) {
	if !strings.HasPrefix(target, "grpc://") {
		return nil, fmt.Errorf("rpc: OpenSession target %q: want grpc://host:port", target)
	}
	m, closer, err := DialMaster(target, opts)
	if err != nil {
		return nil, fmt.Errorf("rpc: OpenSession %q: %w", target, err)
	}
	s, err := session.New(g, append(sopts, session.WithMaster(m, nil), session.WithCloser(closer))...)
	if err != nil {
		closer.Close()
		return nil, err
	}
	return s, nil
}

// loopbackAddr reports whether addr (host:port or host) names a loopback
// host: localhost, 127.0.0.0/8 or ::1. No name is resolved.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
