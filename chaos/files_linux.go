package chaos

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// awaitFile returns the path, relative to dir, of the first file created
// or renamed into dir or a directory in it after the call whose relative
// path matches pattern (filepath.Match: "training_ended" is dir's,
// "*/model.ckpt-*.index.tmp*" a subdirectory's), with inotify: a checkpoint's temporary file lives for
// milliseconds, less than a poll would reliably see.
func awaitFile(ctx context.Context, dir, pattern string) (string, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return "", fmt.Errorf("chaos: inotify: %w", err)
	}
	defer unix.Close(fd)
	const mask = unix.IN_CREATE | unix.IN_MOVED_TO
	dirs := map[int32]string{}
	watch := func(d string) error {
		wd, err := unix.InotifyAddWatch(fd, d, mask)
		if err != nil {
			return fmt.Errorf("chaos: watching %s: %w", d, err)
		}
		dirs[int32(wd)] = d
		return nil
	}
	if err := watch(dir); err != nil {
		return "", err
	}
	// Directories already there (a deputy's): watched too.
	if subs, _ := filepath.Glob(filepath.Join(dir, "*", "")); subs != nil {
		for _, d := range subs {
			_ = watch(d) // a file, or gone: nothing to watch
		}
	}
	buf := make([]byte, 64<<10)
	for {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, 20); err != nil && !errors.Is(err, unix.EINTR) {
			return "", fmt.Errorf("chaos: inotify: %w", err)
		}
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("chaos: inotify: %w", err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			name := string(nameBytes)
			for len(name) > 0 && name[len(name)-1] == 0 {
				name = name[:len(name)-1]
			}
			parent := dirs[ev.Wd]
			if ev.Mask&unix.IN_ISDIR != 0 && parent != "" {
				_ = watch(filepath.Join(parent, name))
			}
			rel, err := filepath.Rel(dir, filepath.Join(parent, name))
			if err != nil {
				continue
			}
			if ok, _ := filepath.Match(pattern, rel); ok {
				return rel, nil
			}
		}
	}
}
