package main

import "syscall"

// childAttrs makes a test's child process die with the test (Linux).
func childAttrs() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
