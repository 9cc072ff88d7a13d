package estimator

import (
	"fmt"
	"os"
	"strconv"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/localcluster"
)

// GPUs choose the accelerators a training task computes on, as distflow
// train's --gpus, --gpu-platform, --logical-gpus, --first-gpu and
// --gpu-memory-fraction do (Flags has them too); Open opens them for
// RunConfig.Devices:
//
//	devs, closeDevs, err := estimator.GPUs{Count: 2, Platform: "cuda"}.Open(cfg.Cluster, cfg.Task)
//
// The "cuda" platform is registered by importing device/cuda; "sim", the
// simulated accelerator, by importing device/sim. Errors name the flags.
type GPUs struct {
	// Count is how many GPUs the task computes on: one tower each (0: the
	// CPU alone).
	Count int
	// Platform is the devices' platform: "cuda" when empty, or "sim".
	Platform string
	// Logical splits each card into this many logical GPUs, each with its
	// share of the memory (0: 1, whole cards).
	Logical int
	// First is the first of the machine's (logical) GPUs the task takes,
	// where FirstSet. Otherwise the first, or for a training task of a
	// local cluster (whose tasks share the machine), GPUs of its own:
	// task k of the chief and workers takes Count GPUs from k*Count on
	// while there are enough, and shares them, with their memory, beyond.
	First    int
	FirstSet bool
	// MemoryFraction is the share of each card's memory this process may
	// use, in (0, 1] (0: 0.9, divided among the training tasks of a local
	// cluster that share a GPU).
	MemoryFraction float64
}

// Check refuses values no machine has GPUs for.
func (g GPUs) Check() error {
	switch {
	case g.Count < 0:
		return fmt.Errorf("--gpus %d: must not be negative (0: the CPU)", g.Count)
	case g.Logical < 0:
		return fmt.Errorf("--logical-gpus %d: must be at least 1", g.Logical)
	case g.FirstSet && g.First < 0:
		return fmt.Errorf("--first-gpu %d: must not be negative", g.First)
	case g.MemoryFraction < 0 || g.MemoryFraction > 1 || g.MemoryFraction != g.MemoryFraction:
		return fmt.Errorf("--gpu-memory-fraction %v: must be in (0, 1]", g.MemoryFraction)
	}
	return nil
}

func (g GPUs) platform() string {
	if g.Platform == "" {
		return "cuda"
	}
	return g.Platform
}

func (g GPUs) logical() int { return max(g.Logical, 1) }

// Open opens the GPUs of task self of spec (nil: a single process), and
// returns them with the function that closes them; none, and a function
// that does nothing, for Count 0. A machine without the platform's GPUs
// or libraries is refused at once, naming what is missing.
func (g GPUs) Open(spec *cluster.Spec, self cluster.TaskID) ([]device.Device, func(), error) {
	if g.Count == 0 {
		return nil, func() {}, nil
	}
	if err := g.Check(); err != nil {
		return nil, nil, err
	}
	p, cards, err := g.probe()
	if err != nil {
		return nil, nil, err
	}
	var tasks, ordinal int
	if localcluster.IsTask() && spec != nil {
		tasks, ordinal = localOrdinal(spec, self)
	}
	first, fraction, err := g.place(cards, tasks, ordinal)
	if err != nil {
		return nil, nil, err
	}
	devs, err := p.Open(device.Options{Count: g.Count, Logical: g.logical(), First: first, MemoryFraction: fraction})
	if err != nil {
		return nil, nil, fmt.Errorf("--gpus %d: %w", g.Count, err)
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
			fraction, in.Name, device.FormatBytes(in.LimitBytes), device.FormatBytes(in.TotalBytes), g.logical())
	}
	return devs, closeAll, nil
}

// CheckLocalCluster refuses, in the launcher of a local cluster of
// trainers training tasks, the GPUs that its tasks would not find as they
// start: before any process starts, rather than as a task that fails (and
// is restarted) with the same error.
func (g GPUs) CheckLocalCluster(trainers int) error {
	if g.Count == 0 {
		return nil
	}
	if err := g.Check(); err != nil {
		return err
	}
	_, cards, err := g.probe()
	if err != nil {
		return err
	}
	for i := range trainers {
		if _, _, err := g.place(cards, trainers, i); err != nil {
			return err
		}
	}
	return nil
}

// probe finds the platform and counts its cards, refusing a machine
// without them.
func (g GPUs) probe() (device.Platform, int, error) {
	p, err := device.Lookup(g.platform())
	if err != nil {
		if g.platform() == "cuda" {
			err = fmt.Errorf("%w (a program registers it by importing github.com/distflow/distflow/device/cuda)", err)
		}
		return nil, 0, fmt.Errorf("--gpu-platform: %w", err)
	}
	cards, err := p.Probe()
	if err != nil {
		return nil, 0, fmt.Errorf("--gpus %d: %w", g.Count, err)
	}
	return p, cards, nil
}

// place returns the first GPU and the memory fraction of task ordinal of
// the tasks training tasks sharing a machine of cards cards (tasks 0: a
// task alone), or why its GPUs are not there.
func (g GPUs) place(cards, tasks, ordinal int) (first int, fraction float64, err error) {
	have := cards * g.logical()
	if g.Count > have {
		return 0, 0, fmt.Errorf("--gpus %d: this machine has %d %s card(s)%s (CUDA_VISIBLE_DEVICES=%q): use --gpus %d, or --logical-gpus to split a card",
			g.Count, cards, g.platform(), logicalNote(g.logical(), have), os.Getenv("CUDA_VISIBLE_DEVICES"), have)
	}
	first, fraction = g.spread(have, tasks, ordinal)
	if first+g.Count > have {
		return 0, 0, fmt.Errorf("--first-gpu %d --gpus %d: this machine has %d %s GPU(s) (%d card(s)%s, CUDA_VISIBLE_DEVICES=%q): the last is %d",
			first, g.Count, have, g.platform(), cards, logicalNote(g.logical(), have), os.Getenv("CUDA_VISIBLE_DEVICES"), have-1)
	}
	return first, fraction, nil
}

// spread returns the first GPU and the memory fraction of task ordinal of
// tasks on a machine of have (logical) GPUs: First and MemoryFraction, or
// for a training task of a local cluster, GPUs of its own while the
// tasks' GPUs fit (ordinal times Count onward), taken in turn beyond,
// each sharer of a GPU with its share of 0.9 of the memory.
func (g GPUs) spread(have, tasks, ordinal int) (first int, fraction float64) {
	fraction = g.MemoryFraction
	if g.FirstSet {
		first = g.First
	}
	if tasks == 0 {
		return first, fraction
	}
	slots := max(have/g.Count, 1)
	if g.FirstSet {
		slots = 1 // every task from the same GPU
	} else {
		first = (ordinal % slots) * g.Count
	}
	if fraction == 0 {
		if sharing := (tasks + slots - 1) / slots; sharing > 1 {
			fraction = 0.9 / float64(sharing)
		}
	}
	return first, fraction
}

// localOrdinal is the number of training tasks of a local cluster and
// the place of self among them: the chief, then the workers.
func localOrdinal(spec *cluster.Spec, self cluster.TaskID) (tasks, ordinal int) {
	chiefs := spec.NumTasks("chief")
	ordinal = self.Index
	if self.Job == "worker" {
		ordinal += chiefs
	}
	return chiefs + spec.NumTasks("worker"), ordinal
}

func logicalNote(logical, have int) string {
	if logical == 1 {
		return ""
	}
	return ", " + strconv.Itoa(have) + " logical GPUs"
}
