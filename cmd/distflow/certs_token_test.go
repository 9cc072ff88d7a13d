package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distflow/distflow/pki"
)

// TestCertsToolToken: `distflow certs tool-token` writes the tool token of
// a cluster token (mode 0600, as pki.ToolToken makes it), refuses to
// replace a file without --overwrite, to write over the cluster token or
// to start from a tool token; `distflow status` reaches a task with the
// token made, and a task refuses to start with it.
func TestCertsToolToken(t *testing.T) {
	const secret = "a-shared-secret-of-the-cluster-0123"
	token := writeToken(t, secret)
	out := filepath.Join(t.TempDir(), "tool.token")
	stdout, stderr, err := run(t, "certs", "tool-token", "--cluster-token-file", token, "--out", out)
	if err != nil || !strings.HasPrefix(stdout, "made "+out) {
		t.Fatalf("certs tool-token: %v\n%s%s", err, stdout, stderr)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := pki.ToolToken([]byte(secret)); string(got) != want {
		t.Errorf("tool token %q; want %q", got, want)
	}
	if strings.Contains(string(got), secret) {
		t.Errorf("the tool token holds the cluster token: %q", got)
	}
	if st, err := os.Stat(out); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("tool token mode: %v %v; want 0600", st.Mode().Perm(), err)
	}

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"existing file", []string{"--cluster-token-file", token, "--out", out}, "--overwrite replaces it"},
		{"over the cluster token", []string{"--cluster-token-file", token, "--out", token, "--overwrite"}, "is the cluster token itself"},
		{"from a tool token", []string{"--cluster-token-file", out, "--out", out + "2"}, "is a tool token already"},
		{"no --out", []string{"--cluster-token-file", token}, "are required"},
	} {
		if _, stderr, err := run(t, append([]string{"certs", "tool-token"}, tc.args...)...); err == nil || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: %v\n%s\nwant an error containing %q", tc.name, err, stderr, tc.want)
		}
	}
	if _, stderr, err := run(t, "certs", "tool-token", "--cluster-token-file", token, "--out", out, "--overwrite"); err != nil {
		t.Errorf("--overwrite: %v\n%s", err, stderr)
	}

	addrs := rpcFreePorts(t, 2)
	p := rpcStartServer(t, "--ps_hosts", addrs[0], "--worker_hosts", addrs[1], "--job_name", "ps", "--cluster-token-file", token)
	<-p.ready
	if stdout, stderr, err := run(t, "status", "--cluster-token-file", out, addrs[0]); err != nil || !strings.Contains(stdout, "/job:ps/task:0") {
		t.Errorf("distflow status with the tool token: %v\n%s%s", err, stdout, stderr)
	}
	if _, stderr, err := run(t, "server", "--ps_hosts", addrs[0], "--worker_hosts", addrs[1], "--job_name", "worker", "--cluster-token-file", out); err == nil || !strings.Contains(stderr, "is a tool's token") {
		t.Errorf("a task started with the tool token: %v\n%s", err, stderr)
	}
}
