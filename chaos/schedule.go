package chaos

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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

// Fault is one planned fault. It fires at At, or, when set, on an event:
// once the run's output shows global step AtStep, or once a file whose
// name matches OnFile appears in the checkpoint directory or a directory
// in it (the moment a checkpoint is written, training ends: the events
// that a fault drawn at a random time seldom hits).
type Fault struct {
	At     time.Duration `json:"at"`     // from the launcher's start
	Kind   Kind          `json:"kind"`   // kill or stop
	Target Task          `json:"target"` // the task hit
	// Pause is how long a stopped task stays stopped (Stop only).
	Pause time.Duration `json:"pause,omitempty"`
	// AtStep, if not 0, fires the fault when a line of the output shows a
	// global step at or past it (progress lines are every 20 local steps).
	AtStep int64 `json:"at_step,omitempty"`
	// OnFile, if set, is a filepath.Match pattern of a path relative to
	// the checkpoint directory ("training_ended", "model.ckpt-*.tmp*", or
	// "replica-1/*.tmp*" in a directory in it): the fault fires when such
	// a file is created or renamed into place (inotify). Files there
	// before the fault's turn do not count.
	OnFile string `json:"on_file,omitempty"`
}

// event is when f fires, in words.
func (f Fault) event() string {
	switch {
	case f.OnFile != "":
		return "when " + f.OnFile + " appears"
	case f.AtStep > 0:
		return fmt.Sprintf("at global step %d", f.AtStep)
	}
	return fmt.Sprintf("at %.1fs", f.At.Seconds())
}

func (f Fault) String() string {
	if f.Kind == Stop {
		return fmt.Sprintf("%s %s %s for %.1fs", f.Kind, f.Target, f.event(), f.Pause.Seconds())
	}
	return fmt.Sprintf("%s %s %s", f.Kind, f.Target, f.event())
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

// ParsePlan reads a fault schedule written by hand: comma-separated
// "kill:TASK@AT" or "stop:TASK@AT+PAUSE", TASK as "worker1", "ps0" or
// "chief0", AT and PAUSE as Go durations: "kill:worker1@2s,stop:ps0@3.5s+2s".
// AT may be an event instead: "step:N" (the output shows global step N)
// or "file:PATTERN" (a file of the checkpoint directory matches PATTERN):
// "stop:worker0@step:300+5s,kill:ps0@step:900",
// "kill:worker0@file:training_ended". A plan with events keeps its order
// (each fault waits for the one before it); one of times alone is sorted.
func ParsePlan(s string) ([]Fault, error) {
	var out []Fault
	events := false
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		bad := func(why string) error {
			return fmt.Errorf("chaos: fault %q: %s: want kill:TASK@AT or stop:TASK@AT+PAUSE, e.g. kill:worker1@2s or stop:ps0@3s+2s", item, why)
		}
		kind, rest, ok := strings.Cut(item, ":")
		if !ok || (kind != string(Kill) && kind != string(Stop)) {
			return nil, bad("no kind")
		}
		task, when, ok := strings.Cut(rest, "@")
		if !ok {
			return nil, bad("no time")
		}
		i := strings.IndexAny(task, "0123456789")
		if i <= 0 {
			return nil, bad("no task")
		}
		idx, err := strconv.Atoi(task[i:])
		if err != nil {
			return nil, bad("bad task index")
		}
		f := Fault{Kind: Kind(kind), Target: Task{Job: task[:i], Index: idx}}
		at, pause, hasPause := strings.Cut(when, "+")
		switch {
		case strings.HasPrefix(at, "step:"):
			events = true
			if f.AtStep, err = strconv.ParseInt(at[len("step:"):], 10, 64); err != nil || f.AtStep <= 0 {
				return nil, bad("bad step")
			}
		case strings.HasPrefix(at, "file:"):
			events = true
			f.OnFile = at[len("file:"):]
			if _, err := filepath.Match(f.OnFile, ""); err != nil || f.OnFile == "" {
				return nil, bad("bad file pattern")
			}
		default:
			if f.At, err = time.ParseDuration(at); err != nil || f.At < 0 {
				return nil, bad("bad time")
			}
		}
		if hasPause != (f.Kind == Stop) {
			return nil, bad("a stop needs a pause, a kill has none")
		}
		if hasPause {
			if f.Pause, err = time.ParseDuration(pause); err != nil || f.Pause <= 0 {
				return nil, bad("bad pause")
			}
		}
		out = append(out, f)
	}
	if !events {
		slices.SortStableFunc(out, func(a, b Fault) int { return cmp.Compare(a.At, b.At) })
	}
	return out, nil
}
