//go:build !linux

package netdelay

import (
	"errors"
	"net"
	"syscall"
)

// errTransparent says why this system cannot serve as a transparent proxy.
var errTransparent = errors.New("netdelay: a transparent proxy needs Linux (SO_ORIGINAL_DST, SO_MARK)")

func originalDst(net.Conn) (string, error) { return "", errTransparent }

func markedDialer(int) *net.Dialer {
	return &net.Dialer{Control: func(string, string, syscall.RawConn) error { return errTransparent }}
}
