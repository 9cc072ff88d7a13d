//go:build unix

package rpc

import (
	"crypto/tls"
	"net"
	"syscall"
)

// idleProbe tells whether an idle tensor-channel connection is still
// open. What it needs, the raw connection and the callback, is made at
// its first use, not each time a connection is taken from the pool.
type idleProbe struct {
	bc    *readBufferedConn // under TLS: what it holds was not asked for
	rc    syscall.RawConn   // nil: peeking is not possible
	err   error             // of SyscallConn
	peek  func(fd uintptr) bool
	alive bool // peek's answer
	b     [1]byte
}

// open reports whether c, an idle connection (always the same one), is
// still open. The server never sends unprompted, so anything to read
// (bytes, a TLS alert, the end of the stream) means it has closed the
// connection. It peeks without blocking and reads nothing.
func (p *idleProbe) open(c net.Conn) bool {
	if p.peek == nil {
		p.init(c)
	}
	if p.bc != nil && p.bc.r.Buffered() > 0 {
		return false
	}
	if p.err != nil {
		return false
	}
	if p.rc == nil {
		return true
	}
	p.alive = false
	err := p.rc.Read(p.peek)
	return err == nil && p.alive
}

func (p *idleProbe) init(c net.Conn) {
	p.peek = p.peekFD
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if bc, ok := c.(*readBufferedConn); ok {
		p.bc, c = bc, bc.Conn
	}
	if sc, ok := c.(syscall.Conn); ok {
		p.rc, p.err = sc.SyscallConn()
	}
}

func (p *idleProbe) peekFD(fd uintptr) bool {
	_, _, err := syscall.Recvfrom(int(fd), p.b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	p.alive = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
	return true
}
