//go:build !linux

package netdelay

import (
	"errors"
	"net"
	"syscall"
)

var errNotLinux = errors.New("netdelay: a transparent proxy needs Linux (SO_ORIGINAL_DST, SO_MARK)")

func originalDst(net.Conn) (string, error) { return "", errNotLinux }

func markedDialer(int) *net.Dialer {
	return &net.Dialer{Control: func(string, string, syscall.RawConn) error { return errNotLinux }}
}
