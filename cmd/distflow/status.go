package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/dashboard"
	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/pki"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/tensor"
)

// newStatusCommand returns `distflow status`: what each task holds.
func newStatusCommand() *cobra.Command {
	var asJSON bool
	var timeout time.Duration
	var security pki.Security
	cmd := &cobra.Command{
		Use:   "status HOST[:PORT]...",
		Short: "Show what tasks of a running cluster hold: their devices and variables",
		Long: fmt.Sprintf(`Show what tasks of a running cluster hold: their devices and variables.
Each GPU is shown with its allocator's memory (in use, peak, limit), read
from the task's metrics.

A task is host:port, host, [IPv6]:port or [IPv6]; without a port, %d.`, cluster.DefaultPort),
		Example: `  distflow status 127.0.0.1:2222 127.0.0.1:2223
  distflow status --json --timeout 2s ps0 worker0:2223
  distflow status --certs-dir certs ps0:2222   # a cluster with certificates`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout <= 0 {
				return fmt.Errorf("status: bad --timeout %v: it must be positive", timeout)
			}
			// Every address is checked before the first is asked.
			addrs := make([]string, len(args))
			for i, a := range args {
				addr, err := cluster.ParseAddress(a, cluster.DefaultPort)
				if err != nil {
					return err
				}
				addrs[i] = addr
			}
			opts, err := security.ClientOptions()
			if err != nil {
				return err
			}
			var all []taskReport
			for _, addr := range addrs {
				st, err := taskStatus(cmd.Context(), addr, timeout, opts)
				if err != nil {
					return err
				}
				r := taskReport{GetStatusResponse: st}
				if hasGPU(st.GetDevices()) {
					r.DeviceMemory, r.deviceErr = deviceMemory(cmd.Context(), st.GetMetricsAddress(), timeout)
				}
				all = append(all, r)
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(all)
			}
			for _, st := range all {
				printStatus(cmd.OutOrStdout(), st)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the statuses as one JSON array")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "how long to wait for each task (positive)")
	addSecurityFlags(cmd.Flags(), &security, true)
	return cmd
}

// taskReport is a task's status and the memory of its accelerators.
type taskReport struct {
	*pb.GetStatusResponse
	// DeviceMemory is each accelerator's allocator (in use, peak, limit),
	// from the task's metrics; none for a task computing on its CPU.
	DeviceMemory []dashboard.DeviceMemory `json:"device_memory,omitempty"`
	deviceErr    error
}

// hasGPU reports whether devices name an accelerator ("/job:w/task:0/gpu:0").
func hasGPU(devices []string) bool {
	for _, d := range devices {
		if strings.Contains(strings.ToLower(d), "gpu:") {
			return true
		}
	}
	return false
}

// deviceMemory reads the memory of a task's accelerators from its metrics
// at addr (GetStatus carries their names only); nothing without addr.
func deviceMemory(ctx context.Context, addr string, timeout time.Duration) ([]dashboard.DeviceMemory, error) {
	if addr == "" {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s", resp.Status)
	}
	fams, err := dashboard.ParseMetrics(resp.Body)
	if err != nil {
		return nil, err
	}
	return dashboard.DevicesFromMetrics(fams), nil
}

// taskStatus asks the task at addr for its status, waiting for it (a task
// still starting) at most timeout. The error names addr.
func taskStatus(ctx context.Context, addr string, timeout time.Duration, opts rpc.Options) (*pb.GetStatusResponse, error) {
	w, closer, err := rpc.DialWorker(addr, opts)
	if err != nil {
		return nil, fmt.Errorf("status: task at %s: %w", addr, err)
	}
	defer closer.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := w.GetStatus(ctx, &pb.GetStatusRequest{})
	switch {
	case err == nil:
		return st, nil
	case ctx.Err() == context.DeadlineExceeded && opts.TLS == nil:
		return nil, fmt.Errorf("status: no answer from %s within %v (is a distflow task running there? a cluster with certificates needs --certs-dir): %w", addr, timeout, err)
	case ctx.Err() == context.DeadlineExceeded:
		return nil, fmt.Errorf("status: no answer from %s within %v (is a distflow task of this cluster running there?): %w", addr, timeout, err)
	}
	return nil, fmt.Errorf("status: task at %s: %w", addr, err)
}

func printStatus(w io.Writer, r taskReport) {
	st := r.GetStatusResponse
	var total int64
	for _, v := range st.GetVariables() {
		total += v.GetBytes()
	}
	fmt.Fprintf(w, "%s (%s): %d variables, %d bytes\n", st.GetTask(), strings.Join(st.GetDevices(), ", "), len(st.GetVariables()), total)
	if a := st.GetMetricsAddress(); a != "" {
		fmt.Fprintf(w, "  metrics: http://%s/metrics\n", a)
	}
	for _, d := range r.DeviceMemory {
		fmt.Fprintf(w, "  %s (%s, card %d, logical GPU %d): %s in use, peak %s, limit %s\n", d.Name, d.Platform, d.Card, d.Logical,
			device.FormatBytes(d.InUse), device.FormatBytes(d.Peak), device.FormatBytes(d.Limit))
	}
	if r.deviceErr != nil {
		fmt.Fprintf(w, "  device memory: no answer from its metrics: %v\n", r.deviceErr)
	}
	for _, v := range st.GetVariables() {
		dims := make([]int, len(v.GetDims()))
		for i, d := range v.GetDims() {
			dims[i] = int(d)
		}
		state := "initialized"
		if !v.GetInitialized() {
			state = "uninitialized"
		}
		fmt.Fprintf(w, "  %-40s %-8s %-14s %10d bytes  %s\n", v.GetName(), tensor.DType(v.GetDtype()),
			tensor.MakeShape(dims...), v.GetBytes(), state)
	}
}
