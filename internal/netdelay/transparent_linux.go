//go:build linux

package netdelay

import (
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// errTransparent says why this system cannot serve as a transparent proxy:
// Linux can.
var errTransparent error

// originalDst is the IPv4 address and port that c's client dialled before
// the host's nat rule redirected it here.
func originalDst(c net.Conn) (string, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return "", fmt.Errorf("netdelay: %T is not a TCP connection", c)
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return "", err
	}
	var sa *unix.IPv6Mreq // 16 bytes: the struct sockaddr_in the kernel writes
	var serr error
	if err := raw.Control(func(fd uintptr) {
		sa, serr = unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
	}); err != nil {
		return "", err
	}
	if serr != nil {
		return "", fmt.Errorf("netdelay: the original destination of %s (no nat redirect?): %w", c.RemoteAddr(), serr)
	}
	b := sa.Multiaddr
	port := uint16(b[2])<<8 | uint16(b[3])
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]}), port).String(), nil
}

// markedDialer dials from sockets marked with mark (SO_MARK, which needs
// CAP_NET_ADMIN).
func markedDialer(mark int) *net.Dialer {
	return &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, mark)
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("netdelay: marking a socket %#x: %w", mark, serr)
		}
		return nil
	}}
}
