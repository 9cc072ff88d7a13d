//go:build !linux

package main

import "syscall"

// childAttrs is nil where a child cannot be tied to its parent's life: the
// tests stop their children themselves.
func childAttrs() *syscall.SysProcAttr { return nil }
