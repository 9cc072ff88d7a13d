//go:build race

package rpc_test

func init() { raceEnabled = true }
