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
	"github.com/distflow/distflow/kernel/linalg"
)

// gpuFlags choose the accelerators a training task computes on.
type gpuFlags struct {
	gpus        int
	platform    string
	logical     int
	first       int
	memFraction float64
	// firstSet and fractionSet: the flags were given.
	firstSet, fractionSet bool
	// ordinal and tasks, set for a task of a local cluster (whose tasks
	// all get the launcher's flags), spread its training tasks over the
	// machine's GPUs: task ordinal of tasks takes GPUs of its own while
	// there are enough, and shares them, with their memory, beyond.
	ordinal, tasks int
}

func (g *gpuFlags) register(fl *pflag.FlagSet) {
	fl.IntVar(&g.gpus, "gpus", 0, "compute on this many GPUs of each worker (0: the CPU): the model's ops run on the GPU, its variables on the ps tasks (or the host); with 2 or more, one tower per GPU, their gradients averaged; CUDA_VISIBLE_DEVICES chooses the cards")
	fl.StringVar(&g.platform, "gpu-platform", "cuda", "the GPUs' platform: cuda, or sim (a simulated accelerator computing with the CPU kernels, for trying and testing the device path anywhere)")
	fl.IntVar(&g.logical, "logical-gpus", 1, "split each card into this many logical GPUs, each with its share of the memory: towers or several workers on one card")
	fl.IntVar(&g.first, "first-gpu", 0, "the first of the machine's (logical) GPUs this task computes on, so that tasks sharing a machine take GPUs of their own (default 0; each training task of --local-cluster its own)")
	fl.Float64Var(&g.memFraction, "gpu-memory-fraction", 0, "share of each card's memory this process may use, in (0, 1] (default 0.9, shared by the training tasks of --local-cluster that share a GPU)")
}

func (g *gpuFlags) check(fl *pflag.FlagSet) []error {
	var errs []error
	if g.gpus < 0 {
		errs = append(errs, fmt.Errorf("--gpus %d: must not be negative (0: the CPU)", g.gpus))
	}
	if g.logical < 1 {
		errs = append(errs, fmt.Errorf("--logical-gpus %d: must be at least 1", g.logical))
	}
	g.firstSet, g.fractionSet = fl.Changed("first-gpu"), fl.Changed("gpu-memory-fraction")
	if g.first < 0 {
		errs = append(errs, fmt.Errorf("--first-gpu %d: must not be negative", g.first))
	}
	if fl.Changed("gpu-memory-fraction") && !(g.memFraction > 0 && g.memFraction <= 1) {
		errs = append(errs, fmt.Errorf("--gpu-memory-fraction %v: must be in (0, 1]", g.memFraction))
	}
	if g.gpus > 0 && linalg.CurrentPrecision() != linalg.Float32 {
		// --precision rounds the CPU kernels' products (AVX512_BF16); a
		// GPU's run in float32, so that the model would compute in one
		// arithmetic on the GPU and another in the ops left on the CPU
		// (and all of it in bf16 on the simulator, which runs the CPU's).
		errs = append(errs, fmt.Errorf("--precision %s --gpus %d: --precision sets the CPU's matrix products; a GPU computes them in float32: drop one of the two",
			linalg.CurrentPrecision(), g.gpus))
	}
	if g.gpus == 0 {
		for _, name := range []string{"gpu-platform", "logical-gpus", "first-gpu", "gpu-memory-fraction"} {
			if fl.Changed(name) {
				errs = append(errs, fmt.Errorf("--%s goes with --gpus", name))
			}
		}
	}
	return errs
}

// open opens the GPUs of a task, or none without --gpus. A machine without
// the platform's GPU or libraries is refused at once, naming what is
// missing.
func (g gpuFlags) open() ([]device.Device, func(), error) {
	if g.gpus == 0 {
		return nil, func() {}, nil
	}
	p, cards, err := g.probe()
	if err != nil {
		return nil, nil, err
	}
	first, fraction, err := g.place(cards)
	if err != nil {
		return nil, nil, err
	}
	devs, err := p.Open(device.Options{Count: g.gpus, Logical: g.logical, First: first, MemoryFraction: fraction})
	if err != nil {
		return nil, nil, fmt.Errorf("--gpus %d: %w", g.gpus, err)
	}
	closeAll := func() {
		for _, d := range devs {
			d.Close()
		}
	}
	// A share that rounds to no memory would fail the first allocation of
	// the first step, as out of memory, far from the flag that caused it.
	if in := devs[0].Info(); in.LimitBytes < device.Alignment {
		closeAll()
		if fraction == 0 {
			fraction = 0.9 // the platforms' default
		}
		return nil, nil, fmt.Errorf("--gpu-memory-fraction %g: leaves %s no memory (%s of the card's %s, split among %d logical GPU(s)): raise it",
			fraction, in.Name, device.FormatBytes(in.LimitBytes), device.FormatBytes(in.TotalBytes), g.logical)
	}
	return devs, closeAll, nil
}

// probe finds the platform and counts its cards, refusing a machine
// without them.
func (g gpuFlags) probe() (device.Platform, int, error) {
	if g.platform == "cuda" && !cudaBuilt {
		return nil, 0, fmt.Errorf("--gpus %d: this distflow was built without CUDA (-tags nocuda, the static build of the CPU image): use a default build, or the GPU image", g.gpus)
	}
	p, err := device.Lookup(g.platform)
	if err != nil {
		return nil, 0, fmt.Errorf("--gpu-platform: %w", err)
	}
	cards, err := p.Probe()
	if err != nil {
		return nil, 0, fmt.Errorf("--gpus %d: %w", g.gpus, err)
	}
	return p, cards, nil
}

// place returns the first GPU and the memory fraction of the task on a
// machine of cards cards, or why its GPUs are not there.
func (g gpuFlags) place(cards int) (first int, fraction float64, err error) {
	have := cards * g.logical
	if g.gpus > have {
		return 0, 0, fmt.Errorf("--gpus %d: this machine has %d %s card(s)%s (CUDA_VISIBLE_DEVICES=%q): use --gpus %d, or --logical-gpus to split a card",
			g.gpus, cards, g.platform, logicalNote(g.logical, have), os.Getenv("CUDA_VISIBLE_DEVICES"), have)
	}
	first, fraction = g.spread(have)
	if first+g.gpus > have {
		return 0, 0, fmt.Errorf("--first-gpu %d --gpus %d: this machine has %d %s GPU(s) (%d card(s)%s, CUDA_VISIBLE_DEVICES=%q): the last is %d",
			first, g.gpus, have, g.platform, cards, logicalNote(g.logical, have), os.Getenv("CUDA_VISIBLE_DEVICES"), have-1)
	}
	return first, fraction, nil
}

// checkLocalCluster refuses, in the launcher of a local cluster of
// trainers training tasks, the GPUs that its tasks would not find as they
// start: before any process starts, rather than as a task that fails (and
// is restarted) with the same error.
func (g gpuFlags) checkLocalCluster(trainers int) error {
	if g.gpus == 0 {
		return nil
	}
	_, cards, err := g.probe()
	if err != nil {
		return err
	}
	for i := range trainers {
		task := g
		task.tasks, task.ordinal = trainers, i
		if _, _, err := task.place(cards); err != nil {
			return err
		}
	}
	return nil
}

// forLocalTask is g for task self of a local cluster: its training tasks
// (the chief, then the workers) share the machine's GPUs, each its own.
func (g gpuFlags) forLocalTask(spec *cluster.Spec, self cluster.TaskID) gpuFlags {
	chiefs := spec.NumTasks("chief")
	g.tasks, g.ordinal = chiefs+spec.NumTasks("worker"), self.Index
	if self.Job == "worker" {
		g.ordinal += chiefs
	}
	return g
}

// logDevices says which of the machine's GPUs a task computes on.
func logDevices(log *slog.Logger, devs []device.Device) {
	for _, d := range devs {
		in := d.Info()
		log.Info("computing on a GPU", "device", "/gpu:"+strings.TrimPrefix(in.Name, "GPU:"), "platform", in.Platform,
			"logical_gpu", in.Logical, "card", in.Physical, "memory_limit", device.FormatBytes(in.LimitBytes))
	}
}

// spread returns the first GPU and the memory fraction of a task on a
// machine of have (logical) GPUs: the flags', or for a training task of a
// local cluster, GPUs of its own while the tasks' GPUs fit (ordinal times
// --gpus onward), taken in turn beyond, each sharer of a GPU with its
// share of 0.9 of the memory.
func (g gpuFlags) spread(have int) (first int, fraction float64) {
	first, fraction = g.first, g.memFraction
	if g.tasks == 0 {
		return first, fraction
	}
	slots := max(have/g.gpus, 1)
	if g.firstSet {
		slots = 1 // every task from the same GPU
	} else {
		first = (g.ordinal % slots) * g.gpus
	}
	if !g.fractionSet {
		if sharing := (g.tasks + slots - 1) / slots; sharing > 1 {
			fraction = 0.9 / float64(sharing)
		}
	}
	return first, fraction
}

func logicalNote(logical, have int) string {
	if logical == 1 {
		return ""
	}
	return fmt.Sprintf(", %d logical GPUs", have)
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
