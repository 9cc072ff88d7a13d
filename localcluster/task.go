package localcluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"
)

// The environment variables Run sets for each task, besides TF_CONFIG (the
// cluster and the task, as cluster.FromEnv reads it) and GOMAXPROCS.
const (
	// EnvTask is "1" in a task started by Run (see IsTask).
	EnvTask = "DISTFLOW_LOCAL_TASK"
	// EnvListenFD is the file descriptor of the task's listening socket,
	// bound to its address in TF_CONFIG (see Listener).
	EnvListenFD = "DISTFLOW_LISTEN_FD"
)

// ErrListenerTaken is returned by Listener when an earlier call took the
// inherited socket.
var ErrListenerTaken = errors.New("localcluster: the inherited listener was already taken")

// IsTask reports whether this process is a task started by Run. A program
// that starts itself as a local cluster checks it to tell the launcher from
// its tasks.
func IsTask() bool { return os.Getenv(EnvTask) == "1" }

var listenerTaken struct {
	sync.Mutex
	taken bool
}

// Listener returns the listening socket Run created for this task, bound to
// the task's address in TF_CONFIG, or nil and no error when the process was
// not started with one (EnvListenFD unset). The task serves on it instead of
// listening itself, so that no other process can take the address between
// Run choosing it and the task using it, and so that a restarted ps serves
// on its predecessor's socket. Connections already queued on the socket are
// closed first: they were made for a predecessor, and their clients see
// them closed and connect again. The caller owns the listener; only the
// first call returns it, later ones return ErrListenerTaken. It is safe for
// concurrent use.
func Listener() (net.Listener, error) {
	v, ok := os.LookupEnv(EnvListenFD)
	if !ok || v == "" {
		return nil, nil
	}
	listenerTaken.Lock()
	defer listenerTaken.Unlock()
	if listenerTaken.taken {
		return nil, ErrListenerTaken
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("localcluster: %s=%q: want a file descriptor of 3 or more", EnvListenFD, v)
	}
	listenerTaken.taken = true
	l, err := listenerFromFile(os.NewFile(uintptr(fd), "localcluster-listener"))
	if err != nil {
		return nil, fmt.Errorf("localcluster: the listener inherited as %s=%d: %w", EnvListenFD, fd, err)
	}
	return l, nil
}

// listenerFromFile turns a socket file into a listener and closes the file
// (the listener holds its own descriptor). Connections already waiting on
// the socket are closed (see dropPending).
func listenerFromFile(f *os.File) (net.Listener, error) {
	defer f.Close()
	l, err := net.FileListener(f)
	if err != nil {
		return nil, err
	}
	if tl, ok := l.(*net.TCPListener); ok {
		if err := dropPending(tl); err != nil {
			l.Close()
			return nil, err
		}
	}
	return l, nil
}

// dropPending closes the connections waiting in l's queue. A task that
// takes over a socket (a ps restarted on its predecessor's) finds there
// the connections made while no one served it, carrying requests of the
// task that died: a tensor request for one of its steps would wait here
// for the whole step timeout for a step this process never runs. Their
// clients see the connection closed and connect again.
func dropPending(l *net.TCPListener) error {
	defer l.SetDeadline(time.Time{})
	for {
		// A deadline in the past would fail Accept before it looked at
		// the queue; a short one ends the loop once the queue is empty.
		if err := l.SetDeadline(time.Now().Add(time.Millisecond)); err != nil {
			return err
		}
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil
			}
			return err
		}
		c.Close()
	}
}
