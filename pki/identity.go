package pki

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/distflow/distflow/cluster"
)

// Scheme is the URI scheme of the identities in distflow certificates.
const Scheme = "distflow"

// Identity is who a certificate names: a task of a cluster, or a client
// (a tool such as distflow status) of it, or the cluster's CA (neither).
type Identity struct {
	// ClusterID names the cluster ("3f9c0a7e5b1d2c48").
	ClusterID string
	// Task is the task, when Client is "" and IsTask.
	Task   cluster.TaskID
	IsTask bool
	// Client names a client identity ("admin").
	Client string
}

// TaskIdentity returns the identity of task in cluster id.
func TaskIdentity(id string, task cluster.TaskID) Identity {
	return Identity{ClusterID: id, Task: task, IsTask: true}
}

// ClientIdentity returns the identity of client name in cluster id.
func ClientIdentity(id, name string) Identity {
	return Identity{ClusterID: id, Client: name}
}

var (
	clusterIDRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	clientRE    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
)

// URI returns id as a certificate's URI SAN.
func (id Identity) URI() *url.URL {
	u := &url.URL{Scheme: Scheme, Host: id.ClusterID}
	switch {
	case id.IsTask:
		u.Path = "/job/" + id.Task.Job + "/task/" + strconv.Itoa(id.Task.Index)
	case id.Client != "":
		u.Path = "/client/" + id.Client
	}
	return u
}

// String names id as the services see it: the task ("/job:worker/task:1"),
// "client:NAME", or "ca".
func (id Identity) String() string {
	switch {
	case id.IsTask:
		return id.Task.String()
	case id.Client != "":
		return "client:" + id.Client
	}
	return "ca"
}

func (id Identity) validate() error {
	if !clusterIDRE.MatchString(id.ClusterID) {
		return fmt.Errorf("pki: bad cluster id %q: want lower-case letters, digits and dashes", id.ClusterID)
	}
	if id.Client != "" && !clientRE.MatchString(id.Client) {
		return fmt.Errorf("pki: bad client name %q: want letters, digits, '.', '_' and '-'", id.Client)
	}
	return nil
}

// errNoIdentity is returned for a certificate without a distflow URI.
var errNoIdentity = errors.New("the certificate names no distflow identity (no distflow:// URI)")

// IdentityOf returns the identity cert names by its distflow URI SAN: the
// CA, a client, or a task with a certificate of its own. A host
// certificate names several tasks: see IdentitiesOf.
func IdentityOf(cert *x509.Certificate) (Identity, error) {
	found, err := IdentitiesOf(cert)
	if err != nil {
		return Identity{}, err
	}
	if len(found) > 1 {
		return Identity{}, fmt.Errorf("the certificate names %d distflow identities; want one", len(found))
	}
	return found[0], nil
}

// IdentitiesOf returns the identities cert names by its distflow URI
// SANs: one, or for a host certificate (CreateConfig.PerHost) every task
// of the host, all of one cluster.
func IdentitiesOf(cert *x509.Certificate) ([]Identity, error) {
	var found []Identity
	for _, u := range cert.URIs {
		if u.Scheme != Scheme {
			continue
		}
		id, err := parseURI(u)
		if err != nil {
			return nil, err
		}
		found = append(found, id)
	}
	if len(found) == 0 {
		return nil, errNoIdentity
	}
	if len(found) > 1 {
		for _, id := range found {
			if !id.IsTask || id.ClusterID != found[0].ClusterID {
				return nil, fmt.Errorf("the certificate names %d distflow identities, not all tasks of one cluster", len(found))
			}
		}
	}
	return found, nil
}

func parseURI(u *url.URL) (Identity, error) {
	id := Identity{ClusterID: u.Host}
	parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	switch {
	case u.Path == "" || u.Path == "/":
	case len(parts) == 4 && parts[0] == "job" && parts[2] == "task":
		n, err := strconv.Atoi(parts[3])
		if err != nil || n < 0 {
			return id, fmt.Errorf("bad distflow identity %s: task index %q", u, parts[3])
		}
		id.Task, id.IsTask = cluster.TaskID{Job: parts[1], Index: n}, true
	case len(parts) == 2 && parts[0] == "client":
		id.Client = parts[1]
	default:
		return id, fmt.Errorf("bad distflow identity %s", u)
	}
	if err := id.validate(); err != nil {
		return id, fmt.Errorf("bad distflow identity %s: %w", u, err)
	}
	return id, nil
}
