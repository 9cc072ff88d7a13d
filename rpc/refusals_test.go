package rpc

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/distflow/distflow/internal/testlog"
)

// TestRefusalsRateLimited: a refusal that repeats is logged refusalBurst
// times per window, then once more with the count it hid; a different
// reason or host is logged at once.
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
	if want := refusalBurst + 3; len(lines) != want {
		t.Fatalf("logged %d lines, want %d (the burst, other reason, other host, after the window):\n%s", len(lines), want, buf.String())
	}
	last := lines[len(lines)-1]
	if want := fmt.Sprintf("repeats=%d", 1000-refusalBurst); !strings.Contains(last, want) {
		t.Errorf("the line after the window does not say %s: %s", want, last)
	}
	for _, l := range lines[:len(lines)-1] {
		if strings.Contains(l, "repeats") {
			t.Errorf("a first refusal says repeats: %s", l)
		}
	}
}
