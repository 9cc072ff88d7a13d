//go:build !linux

package chaos

import (
	"fmt"
	"syscall"
)

// EnvMarker is the environment variable that marks every process of a run.
const EnvMarker = "DISTFLOW_CHAOS_RUN"

type proc struct {
	pid   int
	state byte
	start uint64
	task  *Task
	addrs map[Task]string
}

func (p proc) alive() bool { return true }

func marked(string) ([]proc, error) { return nil, supported() }

func signal(int, syscall.Signal) error { return supported() }

func supported() error {
	return fmt.Errorf("chaos: %w: finding a run's processes needs Linux's /proc", ErrUnsupported)
}

// No faults are injected off Linux: Run stops at marked's error first.
const (
	sigStop syscall.Signal = 0
	sigCont syscall.Signal = 0
)

func launcherAttr() *syscall.SysProcAttr { return nil }

func killGroup(int) {}

func stillRuns(proc) bool { return false }
