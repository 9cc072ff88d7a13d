//go:build !linux

package localcluster

import "syscall"

// sysProcAttr is nil where there is no Pdeathsig: the tasks stay in the
// launcher's process group, so that a Ctrl-C at the terminal or a hangup
// reaches them too, even when the launcher is gone.
func sysProcAttr() *syscall.SysProcAttr { return nil }
