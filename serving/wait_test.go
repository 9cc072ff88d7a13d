package serving

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distflow/distflow/savedmodel"
)

// TestNewWaitsForFirstVersion: with WaitForVersion, a server over a base
// directory that does not exist yet, then holds only a half-written
// version, answers 503 on every endpoint and logs what it waits for; the
// first complete version is served at the next poll.
func TestNewWaitsForFirstVersion(t *testing.T) {
	base := filepath.Join(t.TempDir(), "model")
	var logs bytes.Buffer
	s, err := New(Config{BaseDir: base, ModelName: "m", WaitForVersion: true, PollInterval: -1,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("New on a missing base with WaitForVersion: %v", err)
	}
	defer s.Close()
	if !strings.Contains(logs.String(), "waiting for the model's first version") || !strings.Contains(logs.String(), base) ||
		!strings.Contains(logs.String(), "distflow train --export DIR") {
		t.Errorf("log does not say what the server waits for:\n%s", logs.String())
	}
	hs := httptest.NewServer(s)
	defer hs.Close()
	notReady := func(when string) {
		t.Helper()
		for _, ep := range []struct{ method, path string }{{"GET", ""}, {"GET", "/metadata"}, {"POST", ":predict"}} {
			code, m := do(t, ep.method, hs.URL+"/v1/models/m"+ep.path, `{"instances":[1]}`)
			if msg, _ := m["error"].(string); code != 503 || !strings.Contains(msg, "Could not find any versions of model m") {
				t.Errorf("%s: %s %s: %d %v, want 503 naming the model", when, ep.method, ep.path, code, m)
			}
		}
	}
	notReady("no base directory")

	if err := os.MkdirAll(filepath.Join(base, "1"), 0o755); err != nil { // half-written
		t.Fatal(err)
	}
	if err := s.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	notReady("an incomplete version")

	b := built(t, small(1))
	if _, _, err := savedmodel.WriteVersion(base, b.Model); err != nil {
		t.Fatal(err)
	}
	if err := s.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code, m := do(t, "GET", hs.URL+"/v1/models/m", ""); code != 200 || s.Version() != 2 {
		t.Errorf("after a complete version 2: status %d %v, version %d; want 200 and version 2", code, m, s.Version())
	}
}

// TestNewWaitingRefusesAFileAsBase: waiting is for a directory that is not
// there yet; a base that cannot be a directory is still an error.
func TestNewWaitingRefusesAFileAsBase(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{BaseDir: file, WaitForVersion: true, Logger: quiet}); err == nil {
		t.Error("New with a file as BaseDir succeeded")
	}
}
