package chaos

import "syscall"

// newGroup puts a child in its own process group, without Pdeathsig: it
// outlives its parent, as a leaked task would.
func newGroup() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
