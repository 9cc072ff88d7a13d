package estimator_test

import (
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/pki"
)

// TestSecurityIsOnByDefault: a cluster with an address that is not
// loopback needs certificates, a token or Insecure, and says so in New,
// before anything listens or dials.
func TestSecurityIsOnByDefault(t *testing.T) {
	spec, err := cluster.NewSpec(map[string][]string{"ps": {"192.0.2.1:2222"}, "worker": {"192.0.2.2:2222"}})
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := estimator.RunConfig{Cluster: spec, Task: cluster.TaskID{Job: "worker"}, Logger: quiet, Progress: io.Discard}
	if _, err := estimator.New(linearModel, cfg); !errors.Is(err, pki.ErrInsecure) {
		t.Fatalf("no certificates: %v; want pki.ErrInsecure", err)
	}
	cfg.Security = pki.Security{Insecure: true}
	if _, err := estimator.New(linearModel, cfg); err != nil {
		t.Fatalf("Insecure: %v", err)
	}
	dir := t.TempDir()
	if _, err := pki.Create(pki.CreateConfig{Dir: dir, Spec: spec}); err != nil {
		t.Fatal(err)
	}
	cfg.Security = pki.Security{CertsDir: dir}
	if _, err := estimator.New(linearModel, cfg); err != nil {
		t.Fatalf("with certificates: %v", err)
	}
	cfg.Task = cluster.TaskID{Job: "ps"}
	cfg.Security = pki.Security{CertsDir: t.TempDir()}
	if _, err := estimator.New(linearModel, cfg); err == nil {
		t.Fatalf("an empty certs dir was taken")
	}
}
