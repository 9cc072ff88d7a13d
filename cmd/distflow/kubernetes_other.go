//go:build !unix

package main

import (
	"errors"
	"net"
)

func dupListener(net.Listener) (int, error) {
	return 0, errors.New("DISTFLOW_LISTEN_ADDRESS needs a Unix system")
}
