//go:build !unix

package bundle

import "os"

// Without flock, retention cannot tell a live writer's temporary file
// from a crashed one's, and deletes both as before.
func lockFile(*os.File) error { return nil }

func tryLock(*os.File) bool { return true }
