package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/device"
	_ "github.com/distflow/distflow/device/sim" // --gpu-platform sim
	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/kernel/linalg"
)

// gpuFlags choose the accelerators a training task computes on
// (estimator.GPUs).
type gpuFlags struct {
	estimator.GPUs
}

func (g *gpuFlags) register(fl *pflag.FlagSet) {
	fl.IntVar(&g.Count, "gpus", 0, "compute on this many GPUs of each worker (0: the CPU): the model's ops run on the GPU, its variables on the ps tasks (or the host); with 2 or more, one tower per GPU, their gradients averaged; CUDA_VISIBLE_DEVICES chooses the cards")
	fl.StringVar(&g.Platform, "gpu-platform", "cuda", "the GPUs' platform: cuda, or sim (a simulated accelerator computing with the CPU kernels, for trying and testing the device path anywhere)")
	fl.IntVar(&g.Logical, "logical-gpus", 1, "split each card into this many logical GPUs, each with its share of the memory: towers or several workers on one card")
	fl.IntVar(&g.First, "first-gpu", 0, "the first of the machine's (logical) GPUs this task computes on, so that tasks sharing a machine take GPUs of their own (default 0; each training task of --local-cluster its own)")
	fl.Float64Var(&g.MemoryFraction, "gpu-memory-fraction", 0, "share of each card's memory this process may use, in (0, 1] (default 0.9, shared by the training tasks of --local-cluster that share a GPU)")
}

func (g *gpuFlags) check(fl *pflag.FlagSet) []error {
	var errs []error
	if g.Count < 0 {
		errs = append(errs, fmt.Errorf("--gpus %d: must not be negative (0: the CPU)", g.Count))
	}
	if g.Logical < 1 {
		errs = append(errs, fmt.Errorf("--logical-gpus %d: must be at least 1", g.Logical))
	}
	g.FirstSet = fl.Changed("first-gpu")
	if g.First < 0 {
		errs = append(errs, fmt.Errorf("--first-gpu %d: must not be negative", g.First))
	}
	if fl.Changed("gpu-memory-fraction") && !(g.MemoryFraction > 0 && g.MemoryFraction <= 1) {
		errs = append(errs, fmt.Errorf("--gpu-memory-fraction %v: must be in (0, 1]", g.MemoryFraction))
	}
	if g.Count > 0 && linalg.CurrentPrecision() != linalg.Float32 {
		// --precision rounds the CPU kernels' products (AVX512_BF16); a
		// GPU's run in float32, so that the model would compute in one
		// arithmetic on the GPU and another in the ops left on the CPU
		// (and all of it in bf16 on the simulator, which runs the CPU's).
		errs = append(errs, fmt.Errorf("--precision %s --gpus %d: --precision sets the CPU's matrix products; a GPU computes them in float32: drop one of the two",
			linalg.CurrentPrecision(), g.Count))
	}
	if g.Count == 0 {
		for _, name := range []string{"gpu-platform", "logical-gpus", "first-gpu", "gpu-memory-fraction"} {
			if fl.Changed(name) {
				errs = append(errs, fmt.Errorf("--%s goes with --gpus", name))
			}
		}
	}
	return errs
}

// built refuses the CUDA platform in a binary built without it.
func (g gpuFlags) built() error {
	if g.Count > 0 && g.Platform == "cuda" && !cudaBuilt {
		return fmt.Errorf("--gpus %d: this distflow was built without CUDA (-tags nocuda, the static build of the CPU image): use a default build, or the GPU image", g.Count)
	}
	return nil
}

// open opens the GPUs of task self of spec, or none without --gpus.
func (g gpuFlags) open(spec *cluster.Spec, self cluster.TaskID) ([]device.Device, func(), error) {
	if err := g.built(); err != nil {
		return nil, nil, err
	}
	return g.GPUs.Open(spec, self)
}

// checkLocalCluster refuses, in the launcher of a local cluster, the GPUs
// its trainers training tasks would not find (estimator.GPUs).
func (g gpuFlags) checkLocalCluster(trainers int) error {
	if err := g.built(); err != nil {
		return err
	}
	return g.GPUs.CheckLocalCluster(trainers)
}

// logDevices says which of the machine's GPUs a task computes on.
func logDevices(log *slog.Logger, devs []device.Device) {
	for _, d := range devs {
		in := d.Info()
		log.Info("computing on a GPU", "device", "/gpu:"+strings.TrimPrefix(in.Name, "GPU:"), "platform", in.Platform,
			"logical_gpu", in.Logical, "card", in.Physical, "memory_limit", device.FormatBytes(in.LimitBytes))
	}
}

// deviceResult is one accelerator of a training task in --json's result.
type deviceResult struct {
	Name       string `json:"name"`
	Platform   string `json:"platform"`
	PeakBytes  int64  `json:"peak_bytes"`
	LimitBytes int64  `json:"limit_bytes"`
}

func deviceResults(devs []device.Device) []deviceResult {
	var out []deviceResult
	for _, d := range devs {
		in, st := d.Info(), d.Allocator().Stats()
		out = append(out, deviceResult{Name: in.Name, Platform: in.Platform, PeakBytes: st.Peak, LimitBytes: st.Limit})
	}
	return out
}

func newDevicesCommand() *cobra.Command {
	var platforms []string
	cmd := &cobra.Command{
		Use:   "devices",
		Short: "List this machine's devices: its CPU and each accelerator, with its memory",
		Example: `  distflow devices
  CUDA_VISIBLE_DEVICES=1 distflow devices
  distflow devices --platform sim`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return listDevices(cmd.OutOrStdout(), platforms)
		},
	}
	cmd.Flags().StringSliceVar(&platforms, "platform", []string{"cuda"}, "the accelerator platforms to list: cuda, sim")
	// distflow train's spelling, which users carry over.
	cmd.Flags().StringSliceVar(&platforms, "gpu-platform", []string{"cuda"}, "the same as --platform")
	_ = cmd.Flags().MarkHidden("gpu-platform")
	return cmd
}

// listDevices prints the CPU and the devices of each platform; a platform
// that cannot run here says why.
func listDevices(w io.Writer, platforms []string) error {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "DEVICE\tPLATFORM\tMODEL\tMEMORY\tDETAIL")
	fmt.Fprintf(tw, "/cpu:0\thost\t%s\t%s\t%d cores, %s\n", cpuModel(), device.FormatBytes(hostMemory()), runtime.NumCPU(), runtime.GOARCH)
	var errs []error
	for _, name := range platforms {
		p, err := device.Lookup(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := p.Probe(); err != nil {
			fmt.Fprintf(tw, "-\t%s\t-\t-\t%v\n", name, err)
			continue
		}
		devs, err := p.Open(device.Options{})
		if err != nil {
			fmt.Fprintf(tw, "-\t%s\t-\t-\t%v\n", name, err)
			continue
		}
		for _, d := range devs {
			in := d.Info()
			detail := fmt.Sprintf("card %d", in.Physical)
			if in.Capability != "" {
				detail += ", compute capability " + in.Capability
			}
			fmt.Fprintf(tw, "/gpu:%s\t%s\t%s\t%s\t%s\n", strings.TrimPrefix(in.Name, "GPU:"), name, in.Model, device.FormatBytes(in.TotalBytes), detail)
			d.Close()
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return errors.Join(errs...)
}

// cpuModel is the processor's name from /proc/cpuinfo, where there is one.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

// hostMemory is the machine's memory from /proc/meminfo, or 0.
func hostMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	var kb int64
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "MemTotal:") {
			fmt.Sscanf(strings.TrimPrefix(line, "MemTotal:"), "%d", &kb)
		}
	}
	return kb << 10
}
