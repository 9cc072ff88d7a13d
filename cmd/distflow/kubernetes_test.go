//go:build unix

package main

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/localcluster"
)

// TestFromKubernetes: in an Indexed Job's pod, `distflow train` gets its
// TF_CONFIG from the environment and serves on DISTFLOW_LISTEN_ADDRESS
// through an inherited socket.
func TestFromKubernetes(t *testing.T) {
	t.Setenv(cluster.EnvVar, "")
	t.Setenv(localcluster.EnvListenFD, "")
	t.Setenv(cluster.EnvK8sReplicas, "chief=1,worker=2,ps=1")
	t.Setenv(cluster.EnvK8sName, "mnist")
	t.Setenv(cluster.EnvK8sTask, "worker")
	t.Setenv(cluster.EnvJobCompletionIndex, "1")
	t.Setenv(envListenAddress, "127.0.0.1:0")
	if err := fromKubernetes(&cobra.Command{Use: "train"}, nil); err != nil {
		t.Fatal(err)
	}
	_, self, err := cluster.FromTFConfig(os.Getenv(cluster.EnvVar))
	if err != nil || self != (cluster.TaskID{Job: "worker", Index: 1}) {
		t.Fatalf("TF_CONFIG %q: task %v, %v", os.Getenv(cluster.EnvVar), self, err)
	}
	fd, err := strconv.Atoi(os.Getenv(localcluster.EnvListenFD))
	if err != nil || fd < 3 {
		t.Fatalf("%s=%q", localcluster.EnvListenFD, os.Getenv(localcluster.EnvListenFD))
	}
	f := os.NewFile(uintptr(fd), "inherited")
	lis, err := net.FileListener(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	c, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatalf("the inherited socket does not listen: %v", err)
	}
	c.Close()

	// Another command gets TF_CONFIG but opens no socket; a bad index is
	// named.
	t.Setenv(cluster.EnvVar, "")
	t.Setenv(localcluster.EnvListenFD, "")
	if err := fromKubernetes(&cobra.Command{Use: "server"}, nil); err != nil || os.Getenv(localcluster.EnvListenFD) != "" || os.Getenv(cluster.EnvVar) == "" {
		t.Errorf("server: err %v, %s=%q, TF_CONFIG %q", err, localcluster.EnvListenFD, os.Getenv(localcluster.EnvListenFD), os.Getenv(cluster.EnvVar))
	}
	t.Setenv(cluster.EnvVar, "")
	t.Setenv(cluster.EnvJobCompletionIndex, "2")
	if err := fromKubernetes(&cobra.Command{Use: "train"}, nil); err == nil || !strings.Contains(err.Error(), cluster.EnvJobCompletionIndex) {
		t.Errorf("index 2 of 2 workers: error %v, want one naming %s", err, cluster.EnvJobCompletionIndex)
	}
}
