package chaos

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Kind is the kind of a fault.
type Kind string

const (
	// Kill sends SIGKILL: the task crashes.
	Kill Kind = "kill"
	// Stop sends SIGSTOP, then SIGCONT after the fault's pause: the task
	// stops answering without dying (a straggler, a partition).
	Stop Kind = "stop"
)

// Window is the part of a run, from the launcher's start, in which faults
// are drawn. To should end before training does (RunMatrix uses 80% of the
// clean run's time).
type Window struct {
	From time.Duration `json:"from"`
	To   time.Duration `json:"to"`
}

// Fault is one planned fault.
type Fault struct {
	At     time.Duration `json:"at"`     // from the launcher's start
	Kind   Kind          `json:"kind"`   // kill or stop
	Target Task          `json:"target"` // the task hit
	// Pause is how long a stopped task stays stopped (Stop only).
	Pause time.Duration `json:"pause,omitempty"`
}

func (f Fault) String() string {
	if f.Kind == Stop {
		return fmt.Sprintf("%s %s at %.1fs for %.1fs", f.Kind, f.Target, f.At.Seconds(), f.Pause.Seconds())
	}
	return fmt.Sprintf("%s %s at %.1fs", f.Kind, f.Target, f.At.Seconds())
}

// Schedule draws n faults for a run of cluster from seed: times uniform in
// w (sorted), targets uniform over every task of the cluster, kinds kill or
// stop with equal odds, pauses uniform in [pauseMin, pauseMax]. It is a pure
// function: the same arguments give the same schedule.
func Schedule(seed uint64, cluster string, n int, w Window, pauseMin, pauseMax time.Duration) ([]Fault, error) {
	ts, err := tasks(cluster)
	if err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, fmt.Errorf("chaos: %d faults: want 0 or more", n)
	}
	if w.From < 0 || w.To < w.From {
		return nil, fmt.Errorf("chaos: fault window [%v, %v] is empty or negative: want 0 <= from <= to", w.From, w.To)
	}
	if pauseMin <= 0 || pauseMax < pauseMin {
		return nil, fmt.Errorf("chaos: pause range [%v, %v]: want 0 < min <= max", pauseMin, pauseMax)
	}
	// The second word keeps schedules of the same seed apart from any
	// other use of the seed (the training's own --seed).
	r := rand.New(rand.NewPCG(seed, 0xc4a05))
	faults := make([]Fault, n)
	for i := range faults {
		f := Fault{
			At:     w.From + time.Duration(r.Int64N(int64(w.To-w.From)+1)),
			Target: ts[r.IntN(len(ts))],
			Kind:   Kill,
		}
		if r.IntN(2) == 1 {
			f.Kind = Stop
			f.Pause = pauseMin + time.Duration(r.Int64N(int64(pauseMax-pauseMin)+1))
		}
		faults[i] = f
	}
	slices.SortStableFunc(faults, func(a, b Fault) int { return cmp.Compare(a.At, b.At) })
	return faults, nil
}
