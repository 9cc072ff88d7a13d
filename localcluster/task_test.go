package localcluster

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// TestInheritedListenerDropsPendingConnections: a task taking over a
// listening socket closes the connections queued on it before it started
// (a restarted ps would otherwise serve its predecessor's requests), and
// then serves new ones.
func TestInheritedListenerDropsPendingConnections(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := l.(*net.TCPListener).File()
	l.Close()
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	var stale []net.Conn
	for range 3 { // queued by the kernel: nothing accepts yet
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("a request of the task that died")); err != nil {
			t.Fatal(err)
		}
		stale = append(stale, c)
	}
	taken, err := listenerFromFile(f)
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for i, c := range stale {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("queued connection %d: read %d bytes, %v; want it closed", i, n, err)
		}
	}
	fresh, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	served, err := taken.Accept()
	if err != nil {
		t.Fatalf("a connection made after the takeover: %v", err)
	}
	served.Close()
}

// TestListenerOutsideACluster: a process not started by Run has no
// inherited listener, and says so without an error; a bad descriptor is an
// error.
func TestListenerOutsideACluster(t *testing.T) {
	t.Setenv(EnvListenFD, "")
	if l, err := Listener(); l != nil || err != nil {
		t.Errorf("Listener() without %s = %v, %v; want nil, nil", EnvListenFD, l, err)
	}
	t.Setenv(EnvListenFD, "x")
	if _, err := Listener(); err == nil {
		t.Errorf("Listener() with %s=x: no error", EnvListenFD)
	}
	t.Setenv(EnvTask, "")
	if IsTask() {
		t.Error("IsTask() in the test process")
	}
}
