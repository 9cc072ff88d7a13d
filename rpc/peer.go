package rpc

import (
	"context"
	"crypto/x509"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/distflow/distflow/service"
)

// admit is the single check every incoming call goes through, gRPC and
// tensor channel alike: Options.Authenticate, then Options.Identify, whose
// name the returned context carries (service.WithCaller). A refusal is
// logged with the peer's address and the reason, and returned as
// codes.Unauthenticated, or codes.PermissionDenied when the reason wraps
// service.ErrPermissionDenied (a caller proven to be someone else than it
// claims).
func (o Options) admit(ctx context.Context, method string) (context.Context, error) {
	if o.Authenticate != nil {
		if err := o.Authenticate(ctx); err != nil {
			return ctx, o.refuse(ctx, method, err)
		}
	}
	if o.Identify == nil {
		return ctx, nil
	}
	caller, err := o.Identify(ctx, method)
	if err != nil {
		return ctx, o.refuse(ctx, method, err)
	}
	if caller == "" {
		return ctx, nil
	}
	return service.WithCaller(ctx, caller), nil
}

func (o Options) refuse(ctx context.Context, method string, err error) error {
	logRefusal(o.logger(), time.Now(), "rpc: refused call", PeerAddr(ctx), err, "method", method)
	code := codes.Unauthenticated
	if errors.Is(err, service.ErrPermissionDenied) {
		code = codes.PermissionDenied
	}
	return status.Errorf(code, "rpc: %s: %v", method, err)
}

// PeerAddr returns the address of the peer of a served call ("" when the
// context is not a call's).
func PeerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// PeerCertificate returns the verified certificate of the peer of a served
// call (gRPC or the tensor channel): the leaf of its first verified chain,
// or false when the connection is plaintext or the peer sent none that the
// server's TLS config verified. Options.Identify reads the peer's identity
// from it.
func PeerCertificate(ctx context.Context) (*x509.Certificate, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, false
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return nil, false
	}
	return ti.State.VerifiedChains[0][0], true
}

// admittedStream is a server stream whose context carries what admit added.
type admittedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s admittedStream) Context() context.Context { return s.ctx }
