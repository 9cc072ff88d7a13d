package main

import (
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/localcluster"
)

// envListenAddress makes `distflow train` serve on this address (e.g.
// ":2222", every interface) instead of its address in TF_CONFIG. In a pod
// the address in TF_CONFIG is a DNS name that may not resolve yet when the
// task starts (TensorFlow binds 0.0.0.0 for the same reason).
const envListenAddress = "DISTFLOW_LISTEN_ADDRESS"

// fromKubernetes runs before every command. It builds TF_CONFIG from an
// Indexed Job's environment (cluster.IndexedJobsFromEnv) when TF_CONFIG is
// unset, and, for `train`, opens the listening socket of envListenAddress
// and hands it down as an inherited one (localcluster.EnvListenFD), the way
// a local cluster does. Without those variables it does nothing.
func fromKubernetes(cmd *cobra.Command, _ []string) error {
	if os.Getenv(cluster.EnvVar) == "" {
		j, ok, err := cluster.IndexedJobsFromEnv(os.LookupEnv)
		if err != nil {
			return err
		}
		if ok {
			js, err := j.TFConfig()
			if err != nil {
				return err
			}
			os.Setenv(cluster.EnvVar, js)
		}
	}
	addr := os.Getenv(envListenAddress)
	if addr == "" || cmd.Name() != "train" || os.Getenv(localcluster.EnvListenFD) != "" {
		return nil
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s=%q: %w", envListenAddress, addr, err)
	}
	fd, err := dupListener(lis)
	lis.Close()
	if err != nil {
		return fmt.Errorf("%s=%q: %w", envListenAddress, addr, err)
	}
	os.Setenv(localcluster.EnvListenFD, strconv.Itoa(fd))
	return nil
}
