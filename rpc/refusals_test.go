package rpc

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/distflow/distflow/internal/testlog"
)

// TestRefusalsRateLimited: a refusal that repeats is logged once per
// window, then once more with the count it hid; a different reason or
// host is logged at once.
func TestRefusalsRateLimited(t *testing.T) {
	var buf testlog.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	t0 := time.Unix(1_700_000_000, 0)
	bad := errors.New("remote error: tls: unknown certificate authority")
	for i := range 1000 {
		logRefusal(log, t0.Add(time.Duration(i)*time.Millisecond), "rpc: refused connection", "127.0.0.1:40000", bad)
	}
	logRefusal(log, t0.Add(time.Second), "rpc: refused connection", "127.0.0.1:40001", errors.New("tls: client didn't provide a certificate"))
	logRefusal(log, t0.Add(time.Second), "rpc: refused connection", "127.0.0.2:40000", bad)
	logRefusal(log, t0.Add(refusalWindow+time.Second), "rpc: refused connection", "127.0.0.1:40002", bad)

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("logged %d lines, want 4 (first, other reason, other host, after the window):\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[3], "repeats=999") {
		t.Errorf("the line after the window does not count the 999 hidden repeats: %s", lines[3])
	}
	for _, l := range lines[:3] {
		if strings.Contains(l, "repeats") {
			t.Errorf("a first refusal says repeats: %s", l)
		}
	}
}
