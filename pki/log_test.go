package pki

import (
	"log/slog"
	"testing"
)

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

func testLogger(t *testing.T) *slog.Logger { return slog.New(slog.NewTextHandler(testWriter{t}, nil)) }
