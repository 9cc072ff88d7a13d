package main

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/pki"
)

// TestRefusedClientLearnsLittle: a client whose certificate a task refuses
// (another CA's, an expired one of the cluster's CA, one of another
// cluster or of a task the cluster does not have, or none: plaintext) is
// told at most the TLS alert's kind (unknown certificate authority,
// expired certificate, bad certificate) or sees the connection end, over
// a raw TLS connection and over gRPC alike; the refusal's reason (whose
// certificate, which cluster, which task) is in the task's log only.
func TestRefusedClientLearnsLittle(t *testing.T) {
	addrs := rpcFreePorts(t, 2)
	dir := makeCerts(t, addrs[:1], addrs[1:])
	spec, _, err := cluster.FromFlags(addrs[0], addrs[1], "", "ps", 0)
	if err != nil {
		t.Fatal(err)
	}
	p := rpcStartServer(t, "--ps_hosts", addrs[0], "--worker_hosts", addrs[1], "--job_name", "ps", "--certs-dir", dir)
	<-p.ready
	ca, err := pki.LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}

	clients := outsiders(t, dir, spec)
	cp, kp, _, err := ca.Issue(pki.TaskIdentity(ca.ClusterID, cluster.TaskID{Job: "worker", Index: 0}), []string{"127.0.0.1"}, "", 24*time.Hour, time.Now().Add(-48*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	expired, err := tls.X509KeyPair(cp, kp)
	if err != nil {
		t.Fatal(err)
	}
	clients = append(clients, outsider{"expired, of this cluster", &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: mustPool(t, dir),
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &expired, nil }}, "expired"})

	// What a refused client may read: the connection's end, or a TLS
	// alert's kind, never the words of the reason (gRPC's second call
	// runs out of the time the first, refused, spent retrying).
	allowed := []string{"EOF", "context deadline exceeded", "connection reset by peer", "broken pipe",
		"remote error: tls: bad certificate", "remote error: tls: unknown certificate authority",
		"remote error: tls: expired certificate", "remote error: tls: certificate required"}
	secrets := []string{ca.ClusterID, "othercluster", "/job:", "task:9", "not a task", "is of cluster", "x509", "unknown authority"}
	for _, o := range clients {
		t.Run(o.name, func(t *testing.T) {
			before := strings.Count(p.logs(), "rpc: refused")
			rawErr := rawTLSProbe(addrs[0], o.tls)
			errs := append([]error{rawErr}, callGRPC(addrs[0], o.tls)...)
			for i, err := range errs {
				if err == nil {
					t.Fatalf("probe %d (raw, GetStatus, RunGraph) was not refused", i)
				}
				msg := err.Error()
				for _, s := range secrets {
					if strings.Contains(msg, s) {
						t.Errorf("probe %d: the client reads %q in %q", i, s, msg)
					}
				}
				if !containsAny(msg, allowed) {
					t.Errorf("probe %d: the client reads %q; want only one of %q", i, msg, allowed)
				}
			}
			t.Logf("the client reads: %v", rawErr)
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				logs := p.logs()
				if strings.Count(logs, "rpc: refused") > before && strings.Contains(logs, o.refuse) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the task did not log the refusal with %q:\n%s", o.refuse, logs)
				}
			}
		})
	}
}

// rawTLSProbe dials addr as c (plaintext when nil), sends a few bytes and
// reads, returning the first error the client sees.
func rawTLSProbe(addr string, c *tls.Config) error {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if c != nil {
		c = c.Clone()
		c.ServerName = "127.0.0.1"
		tc := tls.Client(conn, c)
		if err := tc.Handshake(); err != nil {
			return err
		}
		conn = tc
	}
	if _, err := conn.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")); err != nil {
		return err
	}
	var b [64]byte
	for {
		if _, err := conn.Read(b[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return io.EOF
			}
			return err
		}
	}
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
