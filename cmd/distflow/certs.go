package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/pki"
)

// newCertsCommand returns `distflow certs`: the cluster's CA and its
// tasks' and tools' certificates, as `cockroach cert` makes them.
func newCertsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Make and list the certificates that secure a cluster (mutual TLS between its tasks)",
		Long: `Make and list the certificates that secure a cluster.

distflow certs create makes a cluster CA (ca.crt, ca.key) with a new cluster
id, one certificate per task of the cluster (JOB.INDEX.crt and .key, named by
the task and its address) and a client certificate for tools (client.crt,
client.key). Give every task ca.crt and its own two files (ca.key stays with
whoever makes certificates), and start it with --certs-dir: every connection
between tasks then uses mutual TLS, and every call is checked to come from a
task of this cluster.

With --per-host, it makes one certificate per host of the cluster instead
(host.NAME.crt and .key), naming every task on that host: give each machine
ca.crt and its host's two files. A task uses its own files when the
directory has them, else its host's; a host's certificate is accepted for
the tasks of that host only (each call names its task).

distflow certs tool-token makes, for a cluster secured by a cluster token
instead, the tool token that tools are given in its place.`,
	}
	cmd.AddCommand(newCertsCreateCommand(), newCertsListCommand(), newCertsToolTokenCommand())
	return cmd
}

func newCertsCreateCommand() *cobra.Command {
	var f struct {
		dir, psHosts, workerHosts, chiefHosts, keyType, client string
		hosts                                                  []string
		lifetime, caLifetime                                   time.Duration
		overwrite, noClient, perHost                           bool
	}
	cmd := &cobra.Command{
		Use:   "create --dir DIR [--ps_hosts ... --worker_hosts ... | TF_CONFIG]",
		Short: "Make a cluster CA and the certificates of its tasks and tools",
		Example: `  distflow certs create --dir certs --ps_hosts=h0:2222 --worker_hosts=h1:2222,h2:2222
  TF_CONFIG='{"cluster": {...}}' distflow certs create --dir certs
  distflow certs create --dir certs --worker_hosts=h1:2222,h2:2222,h3:2222   # the same CA signs a grown cluster's new tasks
  distflow certs create --dir certs --per-host --ps_hosts=h0:2222 --worker_hosts=h0:2223,h1:2222,h1:2223   # host.h0.crt, host.h1.crt`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.dir == "" {
				return errors.New("certs create: --dir is required")
			}
			job := ""
			switch {
			case f.chiefHosts != "":
				job = "chief"
			case f.workerHosts != "":
				job = "worker"
			case f.psHosts != "":
				job = "ps"
			}
			var spec *cluster.Spec
			var err error
			if job != "" {
				spec, _, err = clusterFromFlags(f.psHosts, f.workerHosts, f.chiefHosts, job, 0, cmd.ErrOrStderr())
			} else if js := os.Getenv(cluster.EnvVar); js != "" {
				spec, err = clusterOfTFConfig(js)
			}
			if err != nil {
				return err
			}
			if spec == nil && f.perHost {
				return errors.New("certs create: --per-host needs the cluster (--ps_hosts/--worker_hosts/--chief_hosts or TF_CONFIG)")
			}
			if spec == nil && f.noClient {
				return errors.New("certs create: no cluster (--ps_hosts/--worker_hosts/--chief_hosts or TF_CONFIG) and --no-client: nothing to make")
			}
			made, err := pki.Create(pki.CreateConfig{
				Dir: f.dir, Spec: spec, PerHost: f.perHost, Hosts: f.hosts, Client: f.client, NoClient: f.noClient,
				KeyType: pki.KeyType(f.keyType), Lifetime: f.lifetime, CALifetime: f.caLifetime, Overwrite: f.overwrite,
			})
			printMade(cmd.OutOrStdout(), made, true)
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dir, "dir", "", "directory of the certificates (made 0700 when missing; a CA there signs the new certificates)")
	addClusterFlags(fl, &f.psHosts, &f.workerHosts, &f.chiefHosts, new(string), new(int))
	_ = fl.MarkHidden("job_name")
	_ = fl.MarkHidden("task_index")
	fl.StringSliceVar(&f.hosts, "hosts", nil, "more host names or IPs for every task's certificate (as the tasks are also reached)")
	fl.StringVar(&f.keyType, "key-type", string(pki.ECDSAP256), "key type: ecdsa-p256 or ed25519")
	fl.StringVar(&f.client, "client-name", "admin", "name of the client certificate's identity, for tools (distflow status)")
	fl.BoolVar(&f.noClient, "no-client", false, "make no client certificate")
	fl.DurationVar(&f.lifetime, "lifetime", pki.DefaultCertLifetime, "validity of the tasks' and client's certificates")
	fl.DurationVar(&f.caLifetime, "ca-lifetime", pki.DefaultCALifetime, "validity of a new CA")
	fl.BoolVar(&f.perHost, "per-host", false, "one certificate per host (host.NAME.crt), naming every task on it, instead of one per task")
	fl.BoolVar(&f.overwrite, "overwrite", false, "replace certificates and keys already in --dir (the CA is kept)")
	return cmd
}

func newCertsListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list DIR",
		Short: "List the certificates of a directory: who each names and when it expires",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			made, err := pki.List(args[0])
			if err != nil {
				return err
			}
			printMade(cmd.OutOrStdout(), made, false)
			return nil
		},
	}
}

func printMade(w io.Writer, made []pki.Made, create bool) {
	now := time.Now()
	for _, m := range made {
		verb := ""
		if create {
			verb = "made "
			if m.Identity.String() == "ca" && !m.New {
				verb = "using "
			}
		}
		who := m.Identity.String()
		if m.Tasks != nil {
			tasks := make([]string, len(m.Tasks))
			for i, t := range m.Tasks {
				tasks[i] = t.String()
			}
			who = "host " + m.Host + ": " + strings.Join(tasks, " ")
		}
		if m.Identity.ClusterID == "" {
			who = "not a distflow certificate"
		} else if who == "ca" {
			who = "cluster CA, cluster id " + m.Identity.ClusterID
		}
		left := m.Expires.Sub(now).Round(24 * time.Hour)
		state := fmt.Sprintf("expires %s (in %d days)", m.Expires.UTC().Format(time.DateOnly), int(left.Hours()/24))
		if left <= 0 {
			state = "EXPIRED " + m.Expires.UTC().Format(time.DateOnly)
		}
		fmt.Fprintf(w, "%s%-14s %s, %s", verb, filepath.Base(m.File), who, state)
		var hosts []string // the identities are named above
		for _, s := range m.SANs {
			if !strings.HasPrefix(s, pki.Scheme+"://") {
				hosts = append(hosts, s)
			}
		}
		if len(hosts) > 0 {
			fmt.Fprintf(w, ", SANs %s", strings.Join(hosts, " "))
		}
		fmt.Fprintln(w)
	}
}

// clusterOfTFConfig reads the cluster of a TF_CONFIG, whose task may be
// missing: certificates are made for all the tasks.
func clusterOfTFConfig(js string) (*cluster.Spec, error) {
	var cfg struct {
		Cluster map[string][]string `json:"cluster"`
	}
	if err := json.Unmarshal([]byte(js), &cfg); err != nil {
		return nil, fmt.Errorf("certs create: %s: %w", cluster.EnvVar, err)
	}
	if len(cfg.Cluster) == 0 {
		return nil, fmt.Errorf("certs create: %s has no cluster", cluster.EnvVar)
	}
	return cluster.NewSpec(cfg.Cluster)
}
