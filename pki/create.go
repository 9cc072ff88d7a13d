package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/distflow/distflow/cluster"
)

// Names of the files in a certificate directory. A task's files are named
// by its job and index: worker.1.crt and worker.1.key.
const (
	CACert     = "ca.crt"
	CAKey      = "ca.key"
	ClientCert = "client.crt"
	ClientKey  = "client.key"
)

// TaskFiles returns the certificate and key file names of task.
func TaskFiles(task cluster.TaskID) (crt, key string) {
	base := task.Job + "." + strconv.Itoa(task.Index)
	return base + ".crt", base + ".key"
}

// HostFiles returns the certificate and key file names of a host
// certificate (CreateConfig.PerHost): host.NAME.crt and .key, with the
// host's name or IP as in the cluster's addresses (lower case; characters
// other than letters, digits, '.' and '-', such as an IPv6 address's
// colons, become '_').
func HostFiles(host string) (crt, key string) {
	host = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	base := "host." + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			return r
		}
		return '_'
	}, host)
	return base + ".crt", base + ".key"
}

// hostOf returns the host part of a task's address.
func hostOf(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return host
}

// Default lifetimes of certificates.
const (
	DefaultCALifetime   = 10 * 365 * 24 * time.Hour
	DefaultCertLifetime = 365 * 24 * time.Hour
)

// KeyType is the kind of key Create makes.
type KeyType string

// The key types: ECDSA on P-256 (the default) or Ed25519.
const (
	ECDSAP256 KeyType = "ecdsa-p256"
	Ed25519   KeyType = "ed25519"
)

// ErrExists is wrapped by the errors of writing a file that exists without
// CreateConfig.Overwrite.
var ErrExists = errors.New("pki: file exists")

func newKey(t KeyType) (crypto.Signer, error) {
	switch t {
	case "", ECDSAP256:
		return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case Ed25519:
		_, k, err := ed25519.GenerateKey(rand.Reader)
		return k, err
	}
	return nil, fmt.Errorf("pki: key type %q: want %s or %s", t, ECDSAP256, Ed25519)
}

// CA is a cluster's certificate authority: it signs the certificates of the
// cluster's tasks and clients, which carry its cluster id.
type CA struct {
	Cert      *x509.Certificate
	Key       crypto.Signer
	ClusterID string
}

// NewClusterID returns a random cluster id (16 hex digits).
func NewClusterID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// NewCA makes the CA of cluster id (NewClusterID when ""), valid from now
// for lifetime (0: DefaultCALifetime).
func NewCA(id string, kt KeyType, lifetime time.Duration, now time.Time) (*CA, error) {
	if id == "" {
		id = NewClusterID()
	}
	ident := Identity{ClusterID: id}
	if err := ident.validate(); err != nil {
		return nil, err
	}
	if lifetime == 0 {
		lifetime = DefaultCALifetime
	}
	key, err := newKey(kt)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{Organization: []string{"distflow"}, OrganizationalUnit: []string{"cluster " + id}, CommonName: "distflow CA " + id},
		NotBefore:             now.Add(-time.Hour), // clocks of a cluster differ a little
		NotAfter:              now.Add(lifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		URIs:                  []*url.URL{ident.URI()},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("pki: making the CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, ClusterID: id}, nil
}

// Issue makes a certificate for id signed by ca, valid from now for
// lifetime (0: DefaultCertLifetime, cut to the CA's own expiry), with the
// given hosts as SANs (IP SANs for IPs, DNS SANs for names; localhost
// also gets 127.0.0.1 and ::1). A task's certificate serves and dials
// (server and client auth), a client's only dials. The id's cluster need
// not be ca's: tests make certificates of other clusters with it.
func (ca *CA) Issue(id Identity, hosts []string, kt KeyType, lifetime time.Duration, now time.Time) (certPEM, keyPEM []byte, cert *x509.Certificate, err error) {
	return ca.issue([]Identity{id}, id.String(), hosts, kt, lifetime, now)
}

// IssueHost makes the certificate of a host that runs the given tasks
// (CreateConfig.PerHost): one key for all of them, every task named by a
// URI SAN of its own, and host and the other hosts as SANs. A peer
// holding it is taken for any of these tasks (the one each call names),
// and for no other. Otherwise as Issue.
func (ca *CA) IssueHost(host string, tasks []Identity, hosts []string, kt KeyType, lifetime time.Duration, now time.Time) (certPEM, keyPEM []byte, cert *x509.Certificate, err error) {
	if len(tasks) == 0 {
		return nil, nil, nil, fmt.Errorf("pki: a certificate for host %s without tasks", host)
	}
	for _, id := range tasks {
		if !id.IsTask {
			return nil, nil, nil, fmt.Errorf("pki: the certificate of host %s may name tasks only, not %s", host, id)
		}
	}
	return ca.issue(tasks, "host "+host, append([]string{host}, hosts...), kt, lifetime, now)
}

func (ca *CA) issue(ids []Identity, name string, hosts []string, kt KeyType, lifetime time.Duration, now time.Time) (certPEM, keyPEM []byte, cert *x509.Certificate, err error) {
	for _, id := range ids {
		if err := id.validate(); err != nil {
			return nil, nil, nil, err
		}
	}
	id := ids[0]
	if lifetime == 0 {
		lifetime = DefaultCertLifetime
	}
	notAfter := now.Add(lifetime)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	key, err := newKey(kt)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{Organization: []string{"distflow"}, OrganizationalUnit: []string{"cluster " + id.ClusterID}, CommonName: name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	for _, id := range ids {
		tmpl.URIs = append(tmpl.URIs, id.URI())
	}
	if _, ok := key.(*ecdsa.PrivateKey); ok {
		tmpl.KeyUsage |= x509.KeyUsageKeyAgreement
	}
	if id.IsTask {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	for _, h := range hosts {
		addSAN(tmpl, h)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("pki: signing the certificate of %s: %w", name, err)
	}
	cert, err = x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", kder), cert, nil
}

// addSAN adds host (a host name or IP, without port) to t's SANs once.
func addSAN(t *x509.Certificate, host string) {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	addIP := func(ip net.IP) {
		for _, x := range t.IPAddresses {
			if x.Equal(ip) {
				return
			}
		}
		t.IPAddresses = append(t.IPAddresses, ip)
	}
	if ip := net.ParseIP(host); ip != nil {
		addIP(ip)
		return
	}
	host = strings.ToLower(host)
	for _, d := range t.DNSNames {
		if d == host {
			return
		}
	}
	t.DNSNames = append(t.DNSNames, host)
	if host == "localhost" {
		addIP(net.IPv4(127, 0, 0, 1))
		addIP(net.IPv6loopback)
	}
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// PEM returns ca's certificate and key, PEM-encoded.
func (ca *CA) PEM() (certPEM, keyPEM []byte, err error) {
	kder, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", ca.Cert.Raw), pemBlock("PRIVATE KEY", kder), nil
}

// LoadCA reads the CA of dir (ca.crt and ca.key).
func LoadCA(dir string) (*CA, error) {
	cert, err := readCert(filepath.Join(dir, CACert))
	if err != nil {
		return nil, err
	}
	id, err := IdentityOf(cert)
	if err != nil || id.IsTask || id.Client != "" {
		return nil, fmt.Errorf("pki: %s is not a distflow cluster CA (%v)", filepath.Join(dir, CACert), err)
	}
	kb, err := os.ReadFile(filepath.Join(dir, CAKey))
	if err != nil {
		return nil, fmt.Errorf("pki: reading the CA key: %w", err)
	}
	b, _ := pem.Decode(kb)
	if b == nil {
		return nil, fmt.Errorf("pki: %s holds no PEM block", filepath.Join(dir, CAKey))
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", filepath.Join(dir, CAKey), err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("pki: %s: not a signing key", filepath.Join(dir, CAKey))
	}
	return &CA{Cert: cert, Key: signer, ClusterID: id.ClusterID}, nil
}

func readCert(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("pki: %s holds no PEM certificate", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", path, err)
	}
	return c, nil
}

// writeFile writes data to path with perm, refusing to replace a file
// unless overwrite.
func writeFile(path string, data []byte, perm fs.FileMode, overwrite bool) error {
	flag := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if overwrite {
		flag = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(path, flag, perm)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%w: %s (pass --overwrite to replace it)", ErrExists, path)
	}
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := f.Chmod(perm); err != nil && !errors.Is(err, errors.ErrUnsupported) {
		// Windows has no such modes; elsewhere a key must not stay readable.
		if perm&0o077 == 0 && !isWindows {
			f.Close()
			return fmt.Errorf("pki: %s: %w", path, err)
		}
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("pki: writing %s: %w", path, err)
	}
	return f.Close()
}

// CreateConfig says what Create makes.
type CreateConfig struct {
	// Dir receives the files; it is made (0700) when missing. A CA already
	// there (ca.crt and ca.key) signs the new certificates; else a new CA,
	// of a new cluster id, is made.
	Dir string
	// Spec lists the tasks: one certificate per task, with its address's
	// host as SAN. Nil makes only the CA and the client certificate.
	Spec *cluster.Spec
	// PerHost makes one certificate per distinct host of Spec instead
	// (HostFiles: host.NAME.crt and .key), naming every task on that host:
	// each machine then holds one key, and a task finds its host's files
	// when it has none of its own. A host's certificate is good for its
	// own tasks only.
	PerHost bool
	// Hosts are added to the SANs of every task's certificate (names or
	// IPs by which the tasks are also reached).
	Hosts []string
	// Client names the client certificate made for tools (client.crt);
	// "" means "admin". NoClient makes none.
	Client   string
	NoClient bool
	// KeyType is the kind of every new key (default ECDSAP256).
	KeyType KeyType
	// CALifetime and Lifetime are how long the CA and the other
	// certificates are valid (0: DefaultCALifetime, DefaultCertLifetime).
	CALifetime, Lifetime time.Duration
	// Overwrite replaces certificates and keys already in Dir (the CA is
	// kept: remove ca.crt and ca.key to make a new cluster).
	Overwrite bool
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Made describes one certificate Create wrote.
type Made struct {
	File     string // path of the certificate
	Identity Identity
	// Tasks are all the tasks a host certificate names (Identity is the
	// first); nil for other certificates.
	Tasks   []Identity
	Host    string // of a host certificate
	Expires time.Time
	SANs    []string
	New     bool // for the CA: made now, not found in Dir
}

// Create makes the CA (unless Dir has one) and the certificates of cfg,
// and returns what it wrote, the CA first. Keys are written 0600,
// certificates 0644.
func Create(cfg CreateConfig) ([]Made, error) {
	now := time.Now()
	if cfg.Now != nil {
		now = cfg.Now()
	}
	if cfg.Dir == "" {
		return nil, errors.New("pki: no directory for the certificates")
	}
	if cfg.Lifetime < 0 || cfg.CALifetime < 0 {
		return nil, fmt.Errorf("pki: certificate lifetimes %v and CA lifetime %v: must not be negative (0: the defaults, %v and %v); a negative one makes certificates that have already expired",
			cfg.Lifetime, cfg.CALifetime, DefaultCertLifetime, DefaultCALifetime)
	}
	switch cfg.KeyType {
	case "", ECDSAP256, Ed25519:
	default:
		return nil, fmt.Errorf("pki: key type %q: want %s or %s", cfg.KeyType, ECDSAP256, Ed25519)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	var made []Made
	ca, err := LoadCA(cfg.Dir)
	switch {
	case err == nil:
		made = append(made, Made{File: filepath.Join(cfg.Dir, CACert), Identity: Identity{ClusterID: ca.ClusterID}, Expires: ca.Cert.NotAfter})
	case errors.Is(err, fs.ErrNotExist):
		if _, serr := os.Stat(filepath.Join(cfg.Dir, CAKey)); serr == nil {
			return nil, fmt.Errorf("pki: %s exists without %s", filepath.Join(cfg.Dir, CAKey), CACert)
		}
		if ca, err = NewCA("", cfg.KeyType, cfg.CALifetime, now); err != nil {
			return nil, err
		}
		cp, kp, err := ca.PEM()
		if err != nil {
			return nil, err
		}
		if err := writeFile(filepath.Join(cfg.Dir, CAKey), kp, 0o600, false); err != nil {
			return nil, err
		}
		if err := writeFile(filepath.Join(cfg.Dir, CACert), cp, 0o644, false); err != nil {
			return nil, err
		}
		made = append(made, Made{File: filepath.Join(cfg.Dir, CACert), Identity: Identity{ClusterID: ca.ClusterID}, Expires: ca.Cert.NotAfter, New: true})
	default:
		return nil, err
	}
	issue := func(m Made, hosts []string, crt, key string) error {
		crt, key = filepath.Join(cfg.Dir, crt), filepath.Join(cfg.Dir, key)
		if !cfg.Overwrite {
			for _, p := range []string{crt, key} {
				if _, err := os.Stat(p); err == nil {
					return fmt.Errorf("%w: %s (pass --overwrite to replace it)", ErrExists, p)
				}
			}
		}
		var cp, kp []byte
		var cert *x509.Certificate
		var err error
		if m.Tasks != nil {
			cp, kp, cert, err = ca.IssueHost(m.Host, m.Tasks, hosts, cfg.KeyType, cfg.Lifetime, now)
		} else {
			cp, kp, cert, err = ca.Issue(m.Identity, hosts, cfg.KeyType, cfg.Lifetime, now)
		}
		if err != nil {
			return err
		}
		if err := writeFile(key, kp, 0o600, cfg.Overwrite); err != nil {
			return err
		}
		if err := writeFile(crt, cp, 0o644, cfg.Overwrite); err != nil {
			return err
		}
		m.File, m.Expires, m.SANs = crt, cert.NotAfter, sans(cert)
		made = append(made, m)
		return nil
	}
	if cfg.Spec != nil && cfg.PerHost {
		var order []string
		tasks := map[string][]Identity{}
		for _, t := range cfg.Spec.Tasks() {
			addr, _ := cfg.Spec.Address(t)
			host := strings.ToLower(hostOf(addr))
			if tasks[host] == nil {
				order = append(order, host)
			}
			tasks[host] = append(tasks[host], TaskIdentity(ca.ClusterID, t))
		}
		for _, host := range order {
			crt, key := HostFiles(host)
			if err := issue(Made{Identity: tasks[host][0], Tasks: tasks[host], Host: host}, cfg.Hosts, crt, key); err != nil {
				return made, err
			}
		}
	} else if cfg.Spec != nil {
		for _, t := range cfg.Spec.Tasks() {
			addr, _ := cfg.Spec.Address(t)
			crt, key := TaskFiles(t)
			if err := issue(Made{Identity: TaskIdentity(ca.ClusterID, t)}, append([]string{hostOf(addr)}, cfg.Hosts...), crt, key); err != nil {
				return made, err
			}
		}
	}
	if !cfg.NoClient {
		name := cfg.Client
		if name == "" {
			name = "admin"
		}
		if err := issue(Made{Identity: ClientIdentity(ca.ClusterID, name)}, nil, ClientCert, ClientKey); err != nil {
			return made, err
		}
	}
	return made, nil
}

func sans(c *x509.Certificate) []string {
	var out []string
	for _, u := range c.URIs {
		out = append(out, u.String())
	}
	out = append(out, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		out = append(out, ip.String())
	}
	return out
}

// List describes the certificates (*.crt) of dir, sorted by file name.
func List(dir string) ([]Made, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.crt"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("pki: no certificates (*.crt) in %s", dir)
	}
	var out []Made
	for _, f := range files {
		c, err := readCert(f)
		if err != nil {
			return nil, err
		}
		m := Made{File: f, Expires: c.NotAfter, SANs: sans(c)}
		if ids, err := IdentitiesOf(c); err == nil {
			m.Identity = ids[0]
			if strings.HasPrefix(c.Subject.CommonName, "host ") {
				m.Tasks, m.Host = ids, strings.TrimPrefix(c.Subject.CommonName, "host ")
			}
		}
		out = append(out, m)
	}
	return out, nil
}
