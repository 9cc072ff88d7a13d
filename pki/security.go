package pki

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/rpc"
)

// Security says how a task or a tool secures its connections: the
// settings behind the --certs-dir, --cluster-token-file and --insecure
// flags, and estimator.RunConfig.Security. The zero value asks for the
// default: plaintext only for a cluster whose every address is loopback.
type Security struct {
	// CertsDir holds ca.crt and this task's certificate and key
	// (TaskFiles), or a tool's client.crt and client.key (see Create).
	// Every connection then uses mutual TLS with the cluster's CA, and
	// every call is checked for membership.
	CertsDir string
	// TokenFile holds a cluster token: a shared secret from which every
	// call's credential is derived (a task's own, HMAC-SHA256(token,
	// "task:" + its name), or a tool's, HMAC-SHA256(token, "tool")) and
	// which every task checks against the name the call claims (see
	// token.go). It is the alternative for setups without per-task
	// certificates (it proves membership, but without certificates nothing
	// is encrypted: use it on a trusted network, or beside CertsDir). For
	// ClientOptions it may instead be a tool token (WriteToolToken), which
	// lets a tool call what tools may call and act as no task.
	TokenFile string
	// Insecure allows plaintext without a token on a cluster with
	// addresses that are not loopback: asked for by name.
	Insecure bool
}

// EnvCertsDir, when set, is the default of Security.CertsDir for the
// distflow command and estimator.FromEnvironment: a local-cluster launcher
// hands its ephemeral certificates down with it.
const EnvCertsDir = "DISTFLOW_CERTS_DIR"

// ErrInsecure is wrapped by the error of a cluster that is not all
// loopback, started without certificates, token or Insecure.
var ErrInsecure = errors.New("pki: refusing to run a cluster without TLS")

// Token metadata keys: the credential derived from the cluster token, and
// the task (or "client:NAME") that sends it.
const (
	tokenKey = "distflow-cluster-token"
	taskKey  = "distflow-task"
)

// clientMethods are what a client identity (a tool) may call: the master
// service (sessions, as grpc:// session targets use it) and a worker's
// status. Graphs, tensors, the ring and Shutdown are the tasks' own.
var clientMethods = []string{"/distflow.MasterService/", "/distflow.WorkerService/GetStatus"}

func clientMayCall(method string) bool {
	for _, m := range clientMethods {
		if strings.HasPrefix(method, m) {
			return true
		}
	}
	return false
}

// Loopback reports whether every address of spec is on loopback
// (localhost, 127.0.0.0/8, ::1). No name is resolved.
func Loopback(spec *cluster.Spec) (bool, []string) {
	var other []string
	for _, t := range spec.Tasks() {
		addr, _ := spec.Address(t)
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		if strings.EqualFold(host, "localhost") {
			continue
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
			continue
		}
		other = append(other, addr)
	}
	return len(other) == 0, other
}

// TaskOptions returns the rpc.Options (TLS, Authenticate, Identify,
// PerRPCCredentials) of task self of spec, for its server and everything
// it dials. With CertsDir: mutual TLS 1.3 with the cluster's CA, peers
// checked at the handshake and on every call (this cluster's id, a task
// of spec, or a client for the methods tools use). With TokenFile: the
// task's credential, derived from the token, on every call, and every
// call's credential checked against the task or tool it claims to come
// from. With neither, plaintext, allowed when Insecure is
// set or spec is all loopback (with one warning on log), else an error
// wrapping ErrInsecure. It reads files only: no network use.
func (s Security) TaskOptions(spec *cluster.Spec, self cluster.TaskID, log *slog.Logger) (rpc.Options, error) {
	if log == nil {
		log = slog.Default()
	}
	var opts rpc.Options
	if s.CertsDir == "" && s.TokenFile == "" {
		if s.Insecure {
			log.Warn("running without TLS or cluster token (--insecure): any process that reaches the cluster's addresses can use it")
			return opts, nil
		}
		if ok, other := Loopback(spec); !ok {
			return opts, fmt.Errorf("%w: the cluster has addresses that are not loopback (%s) and no certificates: "+
				"make them with `distflow certs create --dir DIR` and pass --certs-dir DIR to every task, "+
				"or give --cluster-token-file, or ask for plaintext with --insecure", ErrInsecure, strings.Join(other, ", "))
		}
		log.Warn("plaintext connections: the cluster is all loopback and has no certificates (--certs-dir)")
		return opts, nil
	}
	var checks []func(context.Context, string) (string, error)
	hostCert := false
	if s.CertsDir != "" {
		crt, key, err := ownFiles(s.CertsDir, spec, self)
		if err != nil {
			return opts, err
		}
		ca, cert, err := loadPair(s.CertsDir, crt, key)
		if err != nil {
			return opts, err
		}
		if err := checkOwn(cert, ca, TaskIdentity(ca.id, self)); err != nil {
			return opts, err
		}
		ids, _ := IdentitiesOf(cert.Leaf) // checked by checkOwn
		hostCert = len(ids) > 1
		m := &membership{id: ca.id, spec: spec}
		opts.TLS = &tls.Config{
			MinVersion:       tls.VersionTLS13,
			Certificates:     []tls.Certificate{cert},
			RootCAs:          ca.pool,
			ClientCAs:        ca.pool,
			ClientAuth:       tls.RequireAndVerifyClientCert,
			VerifyConnection: m.verifyConnection,
		}
		checks = append(checks, m.identify)
		warnExpiry(log, cert)
	}
	if s.TokenFile != "" {
		tok, err := readToken(s.TokenFile)
		if err != nil {
			return opts, err
		}
		if bytes.HasPrefix(tok, []byte(toolTokenPrefix)) {
			return opts, fmt.Errorf("pki: %s is a tool's token (made by pki.WriteToolToken), not the cluster token a task needs", s.TokenFile)
		}
		a := newTokenAuth(tok, spec)
		opts.Authenticate = a.authenticate
		opts.PerRPCCredentials = tokenCreds{md: map[string]string{tokenKey: taskCredential(tok, self.String()), taskKey: self.String()}}
		if s.CertsDir == "" {
			checks = append(checks, a.identify)
		}
	} else if hostCert {
		// The certificate names every task of the host: each call says
		// which one makes it (membership.identify checks it is one of them).
		opts.PerRPCCredentials = tokenCreds{md: map[string]string{taskKey: self.String()}}
	}
	opts.Identify = checks[0]
	return opts, nil
}

// ClientOptions returns the rpc.Options of a tool (distflow status, a
// program opening grpc:// sessions): with CertsDir, its client
// certificate (client.crt, client.key) and the CA, which the task it dials
// must present a certificate of this cluster from; with TokenFile, the
// tool's credential (from a tool token, or derived from the cluster
// token); else plaintext.
func (s Security) ClientOptions() (rpc.Options, error) {
	var opts rpc.Options
	if s.CertsDir != "" {
		ca, cert, err := loadPair(s.CertsDir, ClientCert, ClientKey)
		if err != nil {
			return opts, err
		}
		id, err := IdentityOf(cert.Leaf)
		if err != nil {
			return opts, fmt.Errorf("pki: %s: %w", filepath.Join(s.CertsDir, ClientCert), err)
		}
		if err := checkOwn(cert, ca, id); err != nil {
			return opts, err
		}
		m := &membership{id: ca.id}
		opts.TLS = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, RootCAs: ca.pool, VerifyConnection: m.verifyConnection}
	}
	if s.TokenFile != "" {
		cred, err := readToolCredential(s.TokenFile)
		if err != nil {
			return opts, err
		}
		opts.PerRPCCredentials = tokenCreds{md: map[string]string{tokenKey: cred, taskKey: "client:tool"}}
	}
	return opts, nil
}

// ownFiles returns the certificate and key files of task self in dir: its
// own (TaskFiles), else its host's (HostFiles, made with
// CreateConfig.PerHost).
func ownFiles(dir string, spec *cluster.Spec, self cluster.TaskID) (crt, key string, err error) {
	crt, key = TaskFiles(self)
	if _, err := os.Stat(filepath.Join(dir, crt)); err == nil {
		return crt, key, nil
	}
	addr, err := spec.Address(self)
	if err != nil {
		return crt, key, nil // loadPair names the missing file
	}
	hcrt, hkey := HostFiles(hostOf(addr))
	if _, err := os.Stat(filepath.Join(dir, hcrt)); err == nil {
		return hcrt, hkey, nil
	}
	return "", "", fmt.Errorf("pki: no certificate for %s in %s: want %s (made by distflow certs create) or its host's %s (made with --per-host)",
		self, dir, crt, hcrt)
}

type caInfo struct {
	id   string
	pool *x509.CertPool
	cert *x509.Certificate
}

// loadPair reads dir's CA certificate and the given certificate and key.
func loadPair(dir, crt, key string) (*caInfo, tls.Certificate, error) {
	caCert, err := readCert(filepath.Join(dir, CACert))
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	caID, err := IdentityOf(caCert)
	if err != nil || caID.IsTask || caID.Client != "" || !caCert.IsCA {
		return nil, tls.Certificate{}, fmt.Errorf("pki: %s is not a distflow cluster CA", filepath.Join(dir, CACert))
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	keyPath := filepath.Join(dir, key)
	if st, err := os.Stat(keyPath); err == nil && st.Mode().Perm()&0o077 != 0 && !isWindows {
		return nil, tls.Certificate{}, fmt.Errorf("pki: %s is readable by others (mode %v): chmod 600 it", keyPath, st.Mode().Perm())
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, crt), keyPath)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("pki: loading %s: %w", filepath.Join(dir, crt), err)
	}
	return &caInfo{id: caID.ClusterID, pool: pool, cert: caCert}, cert, nil
}

// checkOwn checks that a task's or tool's own certificate is the one it
// should present: signed by the CA, of its cluster, naming want, valid now.
func checkOwn(cert tls.Certificate, ca *caInfo, want Identity) error {
	leaf := cert.Leaf
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return fmt.Errorf("pki: the certificate of %s: %w", want, err)
	}
	ids, err := IdentitiesOf(leaf)
	if err != nil {
		return fmt.Errorf("pki: the certificate of %s: %w", want, err)
	}
	if !slices.Contains(ids, want) {
		return fmt.Errorf("pki: the certificate for %s names %s of cluster %s", want, names(ids), ids[0].ClusterID)
	}
	return nil
}

// names lists identities for messages.
func names(ids []Identity) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id.String()
	}
	return strings.Join(s, ", ")
}

func warnExpiry(log *slog.Logger, cert tls.Certificate) {
	if left := time.Until(cert.Leaf.NotAfter); left < 30*24*time.Hour {
		log.Warn("the task's certificate expires soon: renew it with distflow certs create --overwrite", "expires", cert.Leaf.NotAfter.Format(time.DateOnly))
	}
}

// membership checks that peers belong to the cluster id (and, when spec
// is set, name one of its tasks, or a client).
type membership struct {
	id   string
	spec *cluster.Spec

	// known are the identities of the certificates checked lately, by
	// certificate: a connection's calls all present the same one, and
	// parsing its names took about 3% of a sync ps's CPU. Cleared when
	// it reaches maxKnownCerts.
	mu    sync.Mutex
	known map[*x509.Certificate][]Identity
}

// maxKnownCerts bounds membership.known.
const maxKnownCerts = 256

// check returns the peer identities of a verified certificate (one, or a
// host certificate's tasks), or why it is not a member: every identity
// must be a member. The caller must not modify the result.
func (m *membership) check(cert *x509.Certificate) ([]Identity, error) {
	m.mu.Lock()
	ids, ok := m.known[cert]
	m.mu.Unlock()
	if ok {
		return ids, nil
	}
	ids, err := m.checkNew(cert)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	if m.known == nil || len(m.known) >= maxKnownCerts {
		m.known = map[*x509.Certificate][]Identity{}
	}
	m.known[cert] = ids
	m.mu.Unlock()
	return ids, nil
}

// checkNew is check without the cache.
func (m *membership) checkNew(cert *x509.Certificate) ([]Identity, error) {
	ids, err := IdentitiesOf(cert)
	if err != nil {
		return nil, fmt.Errorf("certificate %q: %w", cert.Subject.CommonName, err)
	}
	for _, id := range ids {
		switch {
		case m.id != "" && id.ClusterID != m.id:
			return nil, fmt.Errorf("certificate of %s is of cluster %s, not of this cluster %s", id, id.ClusterID, m.id)
		case id.IsTask && m.spec != nil && !m.spec.Contains(id.Task):
			return nil, fmt.Errorf("certificate names %s, which is not a task of this cluster (%s)", id, strings.Join(m.spec.TaskNames(), ", "))
		case !id.IsTask && id.Client == "":
			return nil, errors.New("certificate is the cluster CA's, not a task's or a client's")
		}
	}
	return ids, nil
}

// verifyConnection refuses, at the handshake, a peer whose chain is good
// but which is not a member of the cluster (another cluster's certificate
// from the same CA, a task not in the spec).
func (m *membership) verifyConnection(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("pki: the peer sent no certificate")
	}
	if _, err := m.check(cs.PeerCertificates[0]); err != nil {
		return fmt.Errorf("pki: peer not a member: %w", err)
	}
	return nil
}

// identify is Options.Identify with certificates: the caller is the task
// or client its verified certificate names; clients only call the methods
// of tools.
func (m *membership) identify(ctx context.Context, method string) (string, error) {
	cert, ok := rpc.PeerCertificate(ctx)
	if !ok {
		return "", errors.New("no verified client certificate")
	}
	ids, err := m.check(cert)
	if err != nil {
		return "", err
	}
	id := ids[0]
	if len(ids) > 1 {
		// A host certificate: the call names its task, which must be one
		// of the host's.
		md, _ := metadata.FromIncomingContext(ctx)
		v := md.Get(taskKey)
		if len(v) != 1 {
			return "", fmt.Errorf("the certificate of %s names several tasks (%s) and the call does not say which one makes it", cert.Subject.CommonName, names(ids))
		}
		i := slices.IndexFunc(ids, func(id Identity) bool { return id.Task.String() == v[0] })
		if i < 0 {
			return "", fmt.Errorf("the call claims to come from %q, which the certificate of %s does not name (it names %s)", v[0], cert.Subject.CommonName, names(ids))
		}
		id = ids[i]
	}
	if !id.IsTask && !clientMayCall(method) {
		return "", fmt.Errorf("%s is a client: it may not call %s", id, method)
	}
	return id.String(), nil
}

func readToken(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pki: cluster token: %w", err)
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 && !isWindows {
		return nil, fmt.Errorf("pki: cluster token %s is readable by others (mode %v): chmod 600 it", path, st.Mode().Perm())
	}
	tok := bytes.TrimSpace(b)
	if len(tok) < 16 {
		return nil, fmt.Errorf("pki: cluster token %s: %d bytes; want at least 16 (such as from `head -c 32 /dev/urandom | base64`)", path, len(tok))
	}
	if bytes.ContainsAny(tok, "\r\n") {
		return nil, fmt.Errorf("pki: cluster token %s: want one line", path)
	}
	return tok, nil
}

// tokenCreds attach the token (and the sender's name) to every call.
type tokenCreds struct{ md map[string]string }

func (c tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return c.md, nil
}

func (tokenCreds) RequireTransportSecurity() bool { return false }
