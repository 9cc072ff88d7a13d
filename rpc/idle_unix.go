//go:build unix

package rpc

import (
	"crypto/tls"
	"net"
	"syscall"
)

// idleOpen reports whether an idle tensor-channel connection is still
// open. The server never sends unprompted, so anything to read (bytes, a
// TLS alert, the end of the stream) means it has closed the connection.
// It peeks without blocking and reads nothing.
func idleOpen(c net.Conn) bool {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if bc, ok := c.(*readBufferedConn); ok {
		if bc.r.Buffered() > 0 {
			return false
		}
		c = bc.Conn
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
		return true
	})
	return err == nil && open
}
