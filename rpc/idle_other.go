//go:build !unix

package rpc

import "net"

// idleProbe cannot peek here: an idle connection the server has closed
// fails the next request with ErrUnavailable.
type idleProbe struct{}

func (*idleProbe) open(net.Conn) bool { return true }
