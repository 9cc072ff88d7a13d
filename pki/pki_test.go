package pki

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/distflow/distflow/cluster"
)

func testSpec(t *testing.T, ps, workers string) *cluster.Spec {
	t.Helper()
	spec, _, err := cluster.FromFlags(ps, workers, "", "ps", 0)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

func TestCreateFilesAndSANs(t *testing.T) {
	dir := t.TempDir()
	spec := testSpec(t, "localhost:2222", "10.1.2.3:2222,w1.example:2222")
	made, err := Create(CreateConfig{Dir: dir, Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	if len(made) != 5 || !made[0].New {
		t.Fatalf("made %d certificates (%+v); want the CA, 3 tasks and a client", len(made), made)
	}
	want := map[string]string{
		"ps.0.crt":     "distflow://" + made[0].Identity.ClusterID + "/job/ps/task/0 localhost 127.0.0.1 ::1",
		"worker.0.crt": "/job/worker/task/0 10.1.2.3",
		"worker.1.crt": "/job/worker/task/1 w1.example",
		"client.crt":   "/client/admin",
	}
	for _, m := range made[1:] {
		s := strings.Join(m.SANs, " ")
		if w := want[filepath.Base(m.File)]; !strings.Contains(s, w) {
			t.Errorf("%s: SANs %q; want %q in them", m.File, s, w)
		}
		if d := time.Until(m.Expires); d < 364*24*time.Hour || d > 366*24*time.Hour {
			t.Errorf("%s expires in %v; want a year", m.File, d)
		}
	}
	for _, k := range []string{"ca.key", "ps.0.key", "worker.1.key", "client.key"} {
		st, err := os.Stat(filepath.Join(dir, k))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v; want 0600", k, st.Mode().Perm())
		}
	}
	// Again: refused without Overwrite; with it, the same CA signs.
	if _, err := Create(CreateConfig{Dir: dir, Spec: spec}); !errors.Is(err, ErrExists) {
		t.Fatalf("second Create: %v; want ErrExists", err)
	}
	again, err := Create(CreateConfig{Dir: dir, Spec: spec, Overwrite: true, KeyType: Ed25519})
	if err != nil {
		t.Fatal(err)
	}
	if again[0].New || again[0].Identity.ClusterID != made[0].Identity.ClusterID {
		t.Fatalf("Overwrite made a new CA: %+v", again[0])
	}
	list, err := List(dir)
	if err != nil || len(list) != 5 {
		t.Fatalf("List: %d, %v", len(list), err)
	}
}

// handshake runs a TLS handshake between a client and a server config and
// returns the server's view of the connection and both errors.
func handshake(t *testing.T, client, server *tls.Config) (tls.ConnectionState, error, error) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	client = client.Clone()
	client.ServerName = "127.0.0.1"
	sc, cc := tls.Server(a, server), tls.Client(b, client)
	sc.SetDeadline(time.Now().Add(5 * time.Second))
	cc.SetDeadline(time.Now().Add(5 * time.Second))
	cerr := make(chan error, 1)
	go func() {
		err := cc.Handshake()
		if err == nil {
			// TLS 1.3: the client learns of a refusal of its certificate
			// on its first read.
			_, err = cc.Read(make([]byte, 1))
		}
		cerr <- err
	}()
	serr := sc.Handshake()
	if serr == nil {
		sc.Write([]byte{1})
	}
	return sc.ConnectionState(), serr, <-cerr
}

func TestMembership(t *testing.T) {
	spec := testSpec(t, "127.0.0.1:2222", "127.0.0.1:2223,127.0.0.1:2224")
	self := cluster.TaskID{Job: "ps", Index: 0}
	dir, other, log := t.TempDir(), t.TempDir(), testLogger(t)
	made, err := Create(CreateConfig{Dir: dir, Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Create(CreateConfig{Dir: other, Spec: spec}); err != nil {
		t.Fatal(err)
	}
	srv, err := Security{CertsDir: dir}.TaskOptions(spec, self, log)
	if err != nil {
		t.Fatal(err)
	}
	// Certificates of the right CA that are not of this cluster's members.
	ca, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	rogue := func(id Identity) *tls.Config {
		cp, kp, _, err := ca.Issue(id, []string{"127.0.0.1"}, "", 0, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.X509KeyPair(cp, kp)
		if err != nil {
			t.Fatal(err)
		}
		pool := srv.TLS.RootCAs
		return &tls.Config{Certificates: []tls.Certificate{c}, RootCAs: pool}
	}
	w1, err := Security{CertsDir: dir}.TaskOptions(spec, cluster.TaskID{Job: "worker", Index: 1}, log)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := Security{CertsDir: other}.TaskOptions(spec, cluster.TaskID{Job: "worker", Index: 1}, log)
	if err != nil {
		t.Fatal(err)
	}
	tool, err := Security{CertsDir: dir}.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	id := made[0].Identity.ClusterID
	for _, tc := range []struct {
		name   string
		client *tls.Config
		refuse string // in the server's handshake error
	}{
		{"member", w1.TLS, ""},
		{"tool", tool.TLS, ""},
		{"other CA", &tls.Config{RootCAs: srv.TLS.RootCAs, GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &foreign.TLS.Certificates[0], nil // sent although the server asks for its own CA's
		}}, "unknown authority"},
		{"server of another CA", foreign.TLS, "bad certificate"},
		{"other cluster id", rogue(TaskIdentity("otherid", cluster.TaskID{Job: "worker", Index: 0})), "not of this cluster"},
		{"task not in spec", rogue(TaskIdentity(id, cluster.TaskID{Job: "worker", Index: 7})), "not a task of this cluster"},
		{"no certificate", &tls.Config{RootCAs: srv.TLS.RootCAs}, "certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, serr, cerr := handshake(t, tc.client, srv.TLS)
			if tc.refuse == "" {
				if serr != nil || cerr != nil {
					t.Fatalf("refused: server %v, client %v", serr, cerr)
				}
				ctx := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: st}})
				caller, err := srv.Identify(ctx, "/distflow.WorkerService/RunGraph")
				if tc.name == "member" && (err != nil || caller != "/job:worker/task:1") {
					t.Errorf("Identify: %q, %v; want /job:worker/task:1", caller, err)
				}
				if tc.name == "tool" {
					if err == nil {
						t.Errorf("a tool may call RunGraph")
					}
					if caller, err := srv.Identify(ctx, "/distflow.WorkerService/GetStatus"); err != nil || caller != "client:admin" {
						t.Errorf("a tool's GetStatus: %q, %v", caller, err)
					}
				}
				return
			}
			if serr == nil || !strings.Contains(serr.Error(), tc.refuse) {
				t.Fatalf("server: %v; want a refusal with %q", serr, tc.refuse)
			}
			if cerr == nil {
				t.Fatalf("the client was not told")
			}
		})
	}
}

func TestDefaultIsSecure(t *testing.T) {
	log := testLogger(t)
	remote := testSpec(t, "10.0.0.1:2222", "10.0.0.2:2222")
	self := cluster.TaskID{Job: "ps", Index: 0}
	if _, err := (Security{}).TaskOptions(remote, self, log); !errors.Is(err, ErrInsecure) || !strings.Contains(err.Error(), "10.0.0.1:2222") {
		t.Fatalf("no certs, remote cluster: %v; want ErrInsecure naming the addresses", err)
	}
	if o, err := (Security{Insecure: true}).TaskOptions(remote, self, log); err != nil || o.TLS != nil {
		t.Fatalf("--insecure: %v", err)
	}
	if o, err := (Security{}).TaskOptions(testSpec(t, "localhost:2222", "127.0.0.1:2223"), self, log); err != nil || o.TLS != nil {
		t.Fatalf("loopback: %v", err)
	}
	tok := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tok, []byte("0123456789abcdef0123\n"), 0o600)
	o, err := (Security{TokenFile: tok}).TaskOptions(remote, self, log)
	if err != nil || o.Authenticate == nil || o.PerRPCCredentials == nil {
		t.Fatalf("token: %+v, %v", o, err)
	}
	os.Chmod(tok, 0o644)
	if _, err := (Security{TokenFile: tok}).TaskOptions(remote, self, log); err == nil || isWindows {
		t.Fatalf("a token readable by others was taken")
	}
}
