package pki

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/distflow/distflow/cluster"
)

// Ephemeral makes a CA and the certificates of the tasks of jobs (job
// name to number of tasks) on localhost (127.0.0.1, ::1 and localhost are
// in every task's SANs, whatever its port) in a new temporary directory, for a cluster that
// lives as long as one command: the local-cluster launchers pass the
// directory to their tasks (--certs-dir, EnvCertsDir). Call remove when
// the cluster has ended.
func Ephemeral(jobs map[string]int) (dir string, remove func(), err error) {
	addrs, port := map[string][]string{}, 1
	for job, n := range jobs {
		for range n {
			addrs[job] = append(addrs[job], "127.0.0.1:"+strconv.Itoa(port))
			port++
		}
	}
	spec, err := cluster.NewSpec(addrs)
	if err != nil {
		return "", nil, err
	}
	dir, err = os.MkdirTemp("", "distflow-certs-")
	if err != nil {
		return "", nil, fmt.Errorf("pki: ephemeral certificates: %w", err)
	}
	remove = func() { os.RemoveAll(dir) }
	if _, err := Create(CreateConfig{Dir: dir, Spec: spec, Hosts: []string{"localhost"}}); err != nil {
		remove()
		return "", nil, err
	}
	// Nothing signs after this: the CA's key goes at once, so that a
	// launcher killed before remove leaves no key that makes members.
	if err := os.Remove(filepath.Join(dir, CAKey)); err != nil {
		remove()
		return "", nil, fmt.Errorf("pki: ephemeral certificates: %w", err)
	}
	return dir, remove, nil
}
