package localcluster

import "syscall"

// sysProcAttr makes a task die with the launcher (Pdeathsig: SIGKILL, even
// when the launcher itself is killed) and puts it in a process group of its
// own, so that a Ctrl-C at the terminal reaches only the launcher, which
// then stops every task in order (SIGTERM, then SIGKILL) rather than seeing
// them die one by one and mistaking that for failures.
//
// Pdeathsig fires when the thread that started the task exits; Go keeps its
// threads for the life of the process unless the goroutine calling Run
// locked its thread and returns without unlocking it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
