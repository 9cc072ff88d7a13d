//go:build !windows

package pki

const isWindows = false
