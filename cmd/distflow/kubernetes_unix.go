//go:build unix

package main

import (
	"errors"
	"net"
	"syscall"
)

// dupListener returns a descriptor of lis's socket that no *os.File owns
// (so no finalizer closes it), for localcluster.Listener to take.
func dupListener(lis net.Listener) (int, error) {
	tl, ok := lis.(*net.TCPListener)
	if !ok {
		return 0, errors.New("not a TCP listener")
	}
	rc, err := tl.SyscallConn()
	if err != nil {
		return 0, err
	}
	fd, derr := -1, error(nil)
	if err := rc.Control(func(s uintptr) { fd, derr = syscall.Dup(int(s)) }); err != nil {
		return 0, err
	}
	return fd, derr
}
