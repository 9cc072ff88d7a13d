//go:build unix

package bundle

import (
	"os"

	"golang.org/x/sys/unix"
)

// lockFile takes an exclusive flock on f, released when f is closed or its
// process ends (however it ends).
func lockFile(f *os.File) error {
	return unix.Flock(int(f.Fd()), unix.LOCK_EX)
}

// tryLock reports whether f could be locked now (and then unlocks it):
// false while another open file holds the lock.
func tryLock(f *os.File) bool {
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return false
	}
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return true
}
