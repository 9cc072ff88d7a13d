package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	wire "encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/pki"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/rpc/rpcpb"
)

// makeCerts runs `distflow certs create` for the cluster of the given
// addresses and returns the directory.
func makeCerts(t *testing.T, ps []string, workers []string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "certs")
	args := []string{"certs", "create", "--dir", dir, "--worker_hosts", strings.Join(workers, ",")}
	if len(ps) > 0 {
		args = append(args, "--ps_hosts", strings.Join(ps, ","))
	}
	stdout, stderr, err := run(t, args...)
	if err != nil {
		t.Fatalf("certs create: %v\n%s", err, stderr)
	}
	if !strings.Contains(stdout, "made worker.0.crt") || !strings.Contains(stdout, "expires") {
		t.Fatalf("certs create printed:\n%s", stdout)
	}
	return dir
}

// outsider is a client that is not a member of the cluster.
type outsider struct {
	name   string
	tls    *tls.Config // nil: plaintext
	refuse string      // in the server's log line
}

// outsiders are the clients that every service must refuse: plaintext, a
// certificate of another CA, and certificates of the right CA that are not
// of this cluster or not of one of its tasks.
func outsiders(t *testing.T, dir string, spec *cluster.Spec) []outsider {
	t.Helper()
	ca, err := pki.LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	trust := func(get func() tls.Certificate) *tls.Config {
		return &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: mustPool(t, dir),
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { c := get(); return &c, nil }}
	}
	issue := func(ca *pki.CA, id pki.Identity) func() tls.Certificate {
		cp, kp, _, err := ca.Issue(id, []string{"127.0.0.1"}, "", 0, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.X509KeyPair(cp, kp)
		if err != nil {
			t.Fatal(err)
		}
		return func() tls.Certificate { return c }
	}
	other, err := pki.NewCA("", "", 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	w0 := cluster.TaskID{Job: "worker", Index: 0}
	return []outsider{
		{"plaintext", nil, "first record does not look like a TLS handshake"},
		{"another CA", trust(issue(other, pki.TaskIdentity(other.ClusterID, w0))), "unknown authority"},
		{"another cluster, same CA", trust(issue(ca, pki.TaskIdentity("othercluster", w0))), "is of cluster othercluster, not of this cluster"},
		{"a task not in the cluster", trust(issue(ca, pki.TaskIdentity(ca.ClusterID, cluster.TaskID{Job: "worker", Index: 9}))), "not a task of this cluster"},
	}
}

func mustPool(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	opts, err := pki.Security{CertsDir: dir}.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	return opts.TLS.RootCAs
}

// callGRPC makes a GetStatus and a RunGraph call as c.
func callGRPC(addr string, c *tls.Config) []error {
	w, closer, err := rpc.DialWorker(addr, rpc.Options{TLS: c, NoTensorChannel: true})
	if err != nil {
		return []error{err}
	}
	defer closer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err1 := w.GetStatus(ctx, &pb.GetStatusRequest{})
	_, err2 := w.RunGraph(ctx, &pb.RunGraphRequest{GraphHandle: "g", StepId: 1})
	return []error{err1, err2}
}

// recvRaw sends one RecvTensor request over the tensor channel, by hand
// (rpc's client would fall back to gRPC when the channel refuses it), and
// returns the server's error: its error response, or the broken
// connection.
func recvRaw(addr string, c *tls.Config) error {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if c != nil {
		c = c.Clone()
		c.ServerName, c.NextProtos = "127.0.0.1", []string{"distflow-tensors/1"}
		tc := tls.Client(conn, c)
		if err := tc.Handshake(); err != nil {
			return err
		}
		conn = tc
	}
	hello := []byte("distflow-tensors/1.0\r\n\r\n")
	key := "/job:ps/task:0/cpu:0;0;/job:worker/task:0/cpu:0;w;0:0"
	req := wire.LittleEndian.AppendUint64(nil, 1)                    // step
	req = wire.LittleEndian.AppendUint64(req, uint64(2*time.Second)) // timeout
	req = wire.LittleEndian.AppendUint16(req, uint16(len(key)))
	req = append(req, key...)
	req = wire.LittleEndian.AppendUint16(req, 0) // no metadata
	msg := append(hello, wire.LittleEndian.AppendUint32(nil, uint32(len(req)))...)
	if _, err := conn.Write(append(msg, req...)); err != nil {
		return err
	}
	r := bufio.NewReader(conn)
	back := make([]byte, len(hello))
	if _, err := io.ReadFull(r, back); err != nil {
		return fmt.Errorf("no hello back: %w", err)
	}
	kind, err := r.ReadByte()
	if err != nil {
		return fmt.Errorf("no response: %w", err)
	}
	if kind != 1 {
		return errors.New("the tensor channel answered with a tensor")
	}
	var code uint32
	wire.Read(r, wire.LittleEndian, &code)
	return status.Error(codes.Code(code), "tensor channel refused the request")
}

// chunkRing streams one all-reduce chunk to the ring served at addr.
func chunkRing(addr string, c *tls.Config) error {
	creds := insecure.NewCredentials()
	if c != nil {
		creds = credentials.NewTLS(c)
	}
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	st, err := rpcpb.NewRingClient(cc).Chunks(ctx)
	if err != nil {
		return err
	}
	if err := st.Send(&pb.RingChunk{}); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	_, err = st.CloseAndRecv()
	return err
}

// TestSecureClusterRefusesOutsiders starts a task of an all-reduce cluster
// with certificates (its worker service, tensor channel and ring on one
// address) and checks that every outsider is refused by every service,
// with a line in the task's log naming the peer and the reason; that a
// tool's client certificate reads the status but may not run graphs,
// receive tensors or send chunks; and then that the cluster, completed,
// trains.
func TestSecureClusterRefusesOutsiders(t *testing.T) {
	files, addrs := freeListeners(t, 2)
	dir := makeCerts(t, nil, addrs)
	spec, _, err := cluster.FromFlags("", strings.Join(addrs, ","), "", "worker", 1)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"train", "--model", "linreg", "--steps", "200", "--lr", "0.03", "--allreduce", "--json", "--wait-timeout", "60s",
		"--worker_hosts", strings.Join(addrs, ","), "--certs-dir", dir}
	w1 := startTestTask(t, "worker 1", files[1], append(args, "--job_name", "worker", "--task_index", "1")...)
	w1.waitLine(t, "server: started", 30*time.Second)
	addr := addrs[1]

	for _, o := range outsiders(t, dir, spec) {
		t.Run(o.name, func(t *testing.T) {
			before := strings.Count(w1.logs(), "rpc: refused")
			for i, err := range callGRPC(addr, o.tls) {
				if err == nil {
					t.Errorf("gRPC call %d (GetStatus, RunGraph) was served", i)
				}
			}
			if err := recvRaw(addr, o.tls); err == nil {
				t.Errorf("the tensor channel served a RecvTensor")
			}
			if err := chunkRing(addr, o.tls); err == nil {
				t.Errorf("the ring took a chunk")
			}
			waitLogged(t, w1, o.refuse, before+3)
		})
	}

	t.Run("a tool's certificate", func(t *testing.T) {
		tool, err := pki.Security{CertsDir: dir}.ClientOptions()
		if err != nil {
			t.Fatal(err)
		}
		if out, stderr, err := run(t, "status", "--certs-dir", dir, addr); err != nil || !strings.Contains(out, "/job:worker/task:1") {
			t.Fatalf("distflow status --certs-dir: %v\n%s%s", err, out, stderr)
		}
		// A program's session: the master service (grpc:// targets use it).
		m, mc, err := rpc.DialMaster(addr, tool)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		devs, err := m.ListDevices(ctx, &pb.ListDevicesRequest{})
		cancel()
		mc.Close()
		if err != nil || len(devs.GetDevices()) == 0 {
			t.Errorf("ListDevices with a client certificate: %v, %v", devs, err)
		}
		errs := callGRPC(addr, tool.TLS)
		if errs[0] != nil {
			t.Errorf("GetStatus with a client certificate: %v", errs[0])
		}
		if !errors.Is(errs[1], rpc.ErrUnauthenticated) {
			t.Errorf("RunGraph with a client certificate: %v; want a refusal", errs[1])
		}
		if err := recvRaw(addr, tool.TLS); status.Code(err) != codes.Unauthenticated {
			t.Errorf("RecvTensor with a client certificate: %v; want Unauthenticated", err)
		}
		if err := chunkRing(addr, tool.TLS); status.Code(err) != codes.Unauthenticated {
			t.Errorf("a ring chunk with a client certificate: %v; want Unauthenticated", err)
		}
		for _, m := range []string{"WorkerService/RunGraph", "WorkerService/RecvTensor", "Ring/Chunks"} {
			if !strings.Contains(w1.logs(), "is a client: it may not call /distflow."+m) {
				t.Errorf("no refusal of %s logged:\n%s", m, w1.logs())
			}
		}
	})

	t.Run("only the chief stops a task", func(t *testing.T) {
		cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "worker.1.crt"), filepath.Join(dir, "worker.1.key"))
		if err != nil {
			t.Fatal(err)
		}
		c := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: mustPool(t, dir), Certificates: []tls.Certificate{cert}}
		w, closer, err := rpc.DialWorker(addr, rpc.Options{TLS: c})
		if err != nil {
			t.Fatal(err)
		}
		defer closer.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := w.Shutdown(ctx, &pb.ShutdownRequest{Reason: "not the chief"}); err == nil || !strings.Contains(err.Error(), "only /job:worker/task:0 may stop") {
			t.Fatalf("Shutdown from worker 1: %v; want a refusal naming the chief", err)
		}
	})

	w0 := startTestTask(t, "worker 0", files[0], append(args, "--job_name", "worker", "--task_index", "0")...)
	if err := w0.wait(t, 120*time.Second); err != nil {
		t.Fatalf("the chief failed: %v\n%s", err, w0.logs())
	}
	if w := lastJSON(t, w0.output())["W"].(float64); math.Abs(w-2) > 0.1 {
		t.Errorf("all-reduce with certificates: W %.3f; want about 2", w)
	}
}

// waitLogged waits until tk has logged n refusals and one of them says why.
func waitLogged(t *testing.T, tk *task, why string, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		logs := tk.logs()
		if strings.Count(logs, "rpc: refused") >= n && strings.Contains(logs, why) {
			for _, l := range strings.Split(logs, "\n") {
				if strings.Contains(l, why) && !strings.Contains(l, "remote=127.0.0.1:") {
					t.Errorf("a refusal without the peer's address: %s", l)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s logged %d refusals, want %d, one with %q:\n%s", tk.name, strings.Count(logs, "rpc: refused"), n, why, logs)
		}
	}
}

// trainedLinreg waits for the workers of a linear regression run, checks
// that the chief learnt W ≈ 2, and that it stopped the ps.
func trainedLinreg(t *testing.T, ps *task, ws []*task) {
	t.Helper()
	for _, w := range ws {
		if err := w.wait(t, 120*time.Second); err != nil {
			t.Fatalf("%s: %v\n%s", w.name, err, w.logs())
		}
	}
	res := lastJSON(t, ws[0].output())
	if w := res["W"].(float64); math.Abs(w-2) > 0.1 {
		t.Errorf("W %.3f; want about 2", w)
	}
	if err := ps.wait(t, 30*time.Second); err != nil || !strings.Contains(ps.logs(), "training finished") {
		t.Errorf("the ps did not exit when the chief stopped it: %v\n%s", err, ps.logs())
	}
}

// TestClusterWithCertificatesTrains: ps=1, worker=2, each task with its
// certificate, trains linear regression to W ≈ 2.
func TestClusterWithCertificatesTrains(t *testing.T) {
	files, addrs := freeListeners(t, 3)
	dir := makeCerts(t, addrs[:1], addrs[1:])
	ps, ws := startTasksOn(t, files, addrs, "train", "--model", "linreg", "--steps", "200", "--lr", "0.03", "--json", "--wait-timeout", "60s", "--certs-dir", dir)
	// The chief, named by its certificate, may stop the ps.
	trainedLinreg(t, ps, ws)
	if strings.Contains(ws[0].logs(), "rpc: refused") || strings.Contains(ws[0].logs(), "plaintext") {
		t.Errorf("the chief's log:\n%s", ws[0].logs())
	}
}

// startTasksOn starts a ps and workers on the given listeners.
func startTasksOn(t *testing.T, files []*os.File, addrs []string, args ...string) (ps *task, ws []*task) {
	common := append(args, "--ps_hosts", addrs[0], "--worker_hosts", strings.Join(addrs[1:], ","))
	ps = startTestTask(t, "ps", files[0], append(common, "--job_name", "ps", "--task_index", "0")...)
	for i := range addrs[1:] {
		ws = append(ws, startTestTask(t, fmt.Sprintf("worker %d", i), files[1+i],
			append(common, "--job_name", "worker", "--task_index", strconv.Itoa(i))...))
	}
	return ps, ws
}

// TestNonLoopbackClusterNeedsCertificates: a task of a cluster with an
// address that is not loopback refuses to start without certificates,
// token or --insecure, before any network use (the address is never
// dialled: nothing listens there).
func TestNonLoopbackClusterNeedsCertificates(t *testing.T) {
	tfConfig := `{"cluster": {"ps": ["192.0.2.10:2222"], "worker": ["192.0.2.11:2222"]}, "task": {"type": "ps", "index": 0}}`
	for _, sub := range [][]string{
		{"train", "--model", "linreg", "--steps", "10"},
		{"server"},
	} {
		cmd := exec.Command(binary, sub...)
		cmd.Env = append(os.Environ(), "TF_CONFIG="+tfConfig, pki.EnvCertsDir+"=")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "refusing to run a cluster without TLS") ||
			!strings.Contains(string(out), "192.0.2.10:2222") || !strings.Contains(string(out), "--insecure") {
			t.Errorf("%s: %v\n%s", sub[0], err, out)
		}
		if strings.Contains(string(out), "server: started") {
			t.Errorf("%s listened before refusing:\n%s", sub[0], out)
		}
	}
}

// writeToken writes a cluster token file and returns its path.
func writeToken(t *testing.T, tok string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestClusterToken: without certificates, a cluster token is checked on
// every call; a cluster given one trains.
func TestClusterToken(t *testing.T) {
	token := writeToken(t, "a-shared-secret-of-the-cluster-0123")
	addrs := rpcFreePorts(t, 2)
	p := rpcStartServer(t, "--ps_hosts", addrs[0], "--worker_hosts", addrs[1], "--job_name", "ps", "--cluster-token-file", token)
	<-p.ready
	for _, tc := range []struct {
		name  string
		token string
		ok    bool
	}{
		{"no token", "", false},
		{"a wrong token", writeToken(t, "not-the-secret-of-this-cluster!!"), false},
		{"the token", token, true},
	} {
		opts, err := pki.Security{TokenFile: tc.token}.ClientOptions()
		if err != nil {
			t.Fatal(err)
		}
		w, closer, err := rpc.DialWorker(addrs[0], opts)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = w.GetStatus(ctx, &pb.GetStatusRequest{})
		cancel()
		closer.Close()
		if tc.ok != (err == nil) || !tc.ok && !errors.Is(err, rpc.ErrUnauthenticated) {
			t.Errorf("%s: GetStatus: %v", tc.name, err)
		}
	}
	if logs := p.logs(); !strings.Contains(logs, "no cluster token") || !strings.Contains(logs, "wrong cluster token") {
		t.Errorf("the refusals are not logged:\n%s", logs)
	}

	files, taddrs := freeListeners(t, 3)
	_, ws := startTasksOn(t, files, taddrs, "train", "--model", "linreg", "--steps", "200", "--lr", "0.03", "--json", "--wait-timeout", "60s", "--cluster-token-file", token)
	for _, w := range ws {
		if err := w.wait(t, 120*time.Second); err != nil {
			t.Fatalf("%s: %v\n%s", w.name, err, w.logs())
		}
	}
	if w := lastJSON(t, ws[0].output())["W"].(float64); math.Abs(w-2) > 0.1 {
		t.Errorf("W %.3f; want about 2", w)
	}
}

// listenOn returns an inherited listener's file and address on ip, port
// chosen by the kernel (127.0.0.2 is a second loopback "host").
func listenOn(t *testing.T, ip string) (*os.File, string) {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f, err := l.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, l.Addr().String()
}

// claimCreds names the task a call comes from, as a task with a host
// certificate does.
type claimCreds string

func (c claimCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"distflow-task": string(c)}, nil
}
func (claimCreds) RequireTransportSecurity() bool { return true }

// TestPerHostCertificates: a cluster of two hosts (127.0.0.1: the ps and
// worker 0; 127.0.0.2: workers 1 and 2) with one certificate per host from
// `distflow certs create --per-host` trains; the key of 127.0.0.2 passes
// for its own tasks but not for worker 0 or the ps, which are on the other
// host.
func TestPerHostCertificates(t *testing.T) {
	var files []*os.File
	var addrs []string
	for _, ip := range []string{"127.0.0.1", "127.0.0.1", "127.0.0.2", "127.0.0.2"} {
		f, a := listenOn(t, ip)
		files, addrs = append(files, f), append(addrs, a)
	}
	dir := filepath.Join(t.TempDir(), "certs")
	stdout, stderr, err := run(t, "certs", "create", "--dir", dir, "--per-host", "--ps_hosts", addrs[0], "--worker_hosts", strings.Join(addrs[1:], ","))
	if err != nil {
		t.Fatalf("certs create --per-host: %v\n%s", err, stderr)
	}
	for _, want := range []string{"made host.127.0.0.1.crt host 127.0.0.1: /job:ps/task:0 /job:worker/task:0", "made host.127.0.0.2.crt host 127.0.0.2: /job:worker/task:1 /job:worker/task:2"} {
		if !strings.Contains(stdout, want) {
			t.Fatalf("certs create --per-host printed:\n%s\nwant %q", stdout, want)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "worker.*")); len(m) != 0 {
		t.Fatalf("per-task files made too: %v", m)
	}
	common := []string{"train", "--model", "linreg", "--steps", "200", "--lr", "0.03", "--json", "--wait-timeout", "60s", "--certs-dir", dir,
		"--ps_hosts", addrs[0], "--worker_hosts", strings.Join(addrs[1:], ",")}
	ps := startTestTask(t, "ps", files[0], append(common, "--job_name", "ps", "--task_index", "0")...)
	ps.waitLine(t, "serving", 30*time.Second)

	// The key of host 127.0.0.2, used by a process that says it is a task
	// of the other host, or by its own task 1.
	spec, _, err := cluster.FromFlags(addrs[0], strings.Join(addrs[1:], ","), "", "ps", 0)
	if err != nil {
		t.Fatal(err)
	}
	host2, err := pki.Security{CertsDir: dir}.TaskOptions(spec, cluster.TaskID{Job: "worker", Index: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	call := func(claim string) error {
		w, closer, err := rpc.DialWorker(addrs[0], rpc.Options{TLS: host2.TLS, PerRPCCredentials: claimCreds(claim), NoTensorChannel: true})
		if err != nil {
			return err
		}
		defer closer.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = w.GetStatus(ctx, &pb.GetStatusRequest{})
		return err
	}
	if err := call("/job:worker/task:1"); err != nil {
		t.Fatalf("host 127.0.0.2's key as its worker 1: %v", err)
	}
	for _, other := range []string{"/job:worker/task:0", "/job:ps/task:0"} {
		if err := call(other); err == nil || !strings.Contains(err.Error(), "which the certificate of host 127.0.0.2 does not name") {
			t.Errorf("host 127.0.0.2's key claiming %s: %v; want a refusal", other, err)
		}
	}
	waitLogged(t, ps, "which the certificate of host 127.0.0.2 does not name", 2)

	var ws []*task
	for i := range 3 {
		ws = append(ws, startTestTask(t, fmt.Sprintf("worker %d", i), files[1+i], append(common, "--job_name", "worker", "--task_index", strconv.Itoa(i))...))
	}
	// The chief, named by its host's certificate and its claim, may stop
	// the ps.
	trainedLinreg(t, ps, ws)
	for _, w := range ws {
		if strings.Contains(w.logs(), "rpc: refused") {
			t.Errorf("%s's log:\n%s", w.name, w.logs())
		}
	}
}
