package pki

import (
	"context"
	"crypto/tls"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
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

// TestPerHost: one certificate per host names the host's tasks; each task
// loads its host's files; a peer holding a host's certificate is taken for
// the task each call names when that task is on the host, and for no
// other.
func TestPerHost(t *testing.T) {
	spec := testSpec(t, "127.0.0.1:2222", "127.0.0.1:2223,127.0.0.2:2224,127.0.0.2:2225")
	dir, log := t.TempDir(), testLogger(t)
	made, err := Create(CreateConfig{Dir: dir, Spec: spec, PerHost: true})
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, m := range made {
		files = append(files, filepath.Base(m.File))
	}
	if got := strings.Join(files, " "); got != "ca.crt host.127.0.0.1.crt host.127.0.0.2.crt client.crt" {
		t.Fatalf("made %s; want the CA, one certificate per host and the client's", got)
	}
	if got := names(made[2].Tasks); got != "/job:worker/task:1, /job:worker/task:2" || made[2].Host != "127.0.0.2" {
		t.Errorf("host 127.0.0.2's certificate names %s (host %q)", got, made[2].Host)
	}
	if st, err := os.Stat(filepath.Join(dir, "host.127.0.0.2.key")); err != nil || st.Mode().Perm() != 0o600 && !isWindows {
		t.Errorf("host key: %v, %v; want mode 0600", st, err)
	}
	list, err := List(dir)
	if err != nil || len(list) != 4 || names(list[3].Tasks) != names(made[2].Tasks) { // sorted by file name
		t.Fatalf("List: %+v, %v", list, err)
	}

	opts := map[string]*tls.Config{}
	for _, task := range spec.Tasks() {
		o, err := Security{CertsDir: dir}.TaskOptions(spec, task, log)
		if err != nil {
			t.Fatalf("%s: %v", task, err)
		}
		opts[task.String()] = o.TLS
		// Every call says which of the host's tasks makes it.
		md, err := o.PerRPCCredentials.GetRequestMetadata(context.Background())
		if err != nil || md[taskKey] != task.String() {
			t.Errorf("%s's calls carry %v, %v", task, md, err)
		}
	}
	srv, err := Security{CertsDir: dir}.TaskOptions(spec, cluster.TaskID{Job: "ps"}, log)
	if err != nil {
		t.Fatal(err)
	}
	st, serr, cerr := handshake(t, opts["/job:worker/task:2"], srv.TLS)
	if serr != nil || cerr != nil {
		t.Fatalf("a host certificate was refused: server %v, client %v", serr, cerr)
	}
	identify := func(claim string) (string, error) {
		ctx := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: st}})
		if claim != "" {
			ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(taskKey, claim))
		}
		return srv.Identify(ctx, "/distflow.WorkerService/RunGraph")
	}
	for _, tc := range []struct{ claim, want, refuse string }{
		{"/job:worker/task:2", "/job:worker/task:2", ""},
		{"/job:worker/task:1", "/job:worker/task:1", ""},
		{"/job:worker/task:0", "", "does not name"}, // on the other host
		{"/job:ps/task:0", "", "does not name"},
		{"", "", "does not say which"},
	} {
		got, err := identify(tc.claim)
		if tc.refuse == "" && (err != nil || got != tc.want) || tc.refuse != "" && (err == nil || !strings.Contains(err.Error(), tc.refuse)) {
			t.Errorf("a call claiming %q: %q, %v; want %q or a refusal with %q", tc.claim, got, err, tc.want, tc.refuse)
		}
	}

	// A host certificate naming a task the cluster does not have is
	// refused at the handshake, although the CA signed it.
	ca, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	cp, kp, _, err := ca.IssueHost("127.0.0.2", []Identity{
		TaskIdentity(ca.ClusterID, cluster.TaskID{Job: "worker", Index: 1}),
		TaskIdentity(ca.ClusterID, cluster.TaskID{Job: "worker", Index: 9}),
	}, nil, "", 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rogue, err := tls.X509KeyPair(cp, kp)
	if err != nil {
		t.Fatal(err)
	}
	if _, serr, _ := handshake(t, &tls.Config{Certificates: []tls.Certificate{rogue}, RootCAs: srv.TLS.RootCAs}, srv.TLS); serr == nil || !strings.Contains(serr.Error(), "not a task of this cluster") {
		t.Errorf("a host certificate naming /job:worker/task:9: %v; want a refusal", serr)
	}
	// A task whose host has no certificate is told what to make.
	os.Remove(filepath.Join(dir, "host.127.0.0.2.crt"))
	if _, err := (Security{CertsDir: dir}).TaskOptions(spec, cluster.TaskID{Job: "worker", Index: 2}, log); err == nil || !strings.Contains(err.Error(), "host.127.0.0.2.crt") {
		t.Errorf("no host certificate: %v; want an error naming host.127.0.0.2.crt", err)
	}
}

func TestHostFiles(t *testing.T) {
	for host, want := range map[string]string{"h1.example": "host.h1.example.crt", "W1": "host.w1.crt", "[::1]": "host.__1.crt", "::1": "host.__1.crt", "10.0.0.1": "host.10.0.0.1.crt"} {
		if crt, key := HostFiles(host); crt != want || key != strings.TrimSuffix(want, ".crt")+".key" {
			t.Errorf("HostFiles(%q) = %s, %s; want %s", host, crt, key, want)
		}
	}
}

// TestEphemeralLeavesNoCAKey: the temporary certificates of a local
// cluster keep no CA key on disk, so a launcher killed before it cleans up
// leaves nothing that signs new members.
func TestEphemeralLeavesNoCAKey(t *testing.T) {
	dir, remove, err := Ephemeral(map[string]int{"ps": 1, "worker": 2})
	if err != nil {
		t.Fatal(err)
	}
	defer remove()
	if _, err := os.Stat(filepath.Join(dir, CAKey)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s after Ephemeral: %v, want it gone", CAKey, err)
	}
	for _, f := range []string{CACert, "ps.0.crt", "worker.1.key"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("Ephemeral made no %s: %v", f, err)
		}
	}
}

// TestCreateRefusesNegativeLifetimes: certificates that have expired when
// they are made are refused, naming the flag's value.
func TestCreateRefusesNegativeLifetimes(t *testing.T) {
	spec, err := cluster.NewSpec(map[string][]string{"worker": {"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []CreateConfig{{Lifetime: -time.Hour}, {CALifetime: -time.Hour}} {
		cfg.Dir, cfg.Spec = t.TempDir(), spec
		if _, err := Create(cfg); err == nil || !strings.Contains(err.Error(), "-1h0m0s") {
			t.Errorf("Create with lifetimes %v, %v: %v, want an error naming -1h0m0s", cfg.Lifetime, cfg.CALifetime, err)
		}
	}
}
