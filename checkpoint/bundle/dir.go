package bundle

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// StateFile is the name of the file, in a checkpoint directory, that lists
// the retained complete checkpoints in TensorFlow's text form:
//
//	model_checkpoint_path: "model.ckpt-300"
//	all_model_checkpoint_paths: "model.ckpt-100"
//	all_model_checkpoint_paths: "model.ckpt-200"
//	all_model_checkpoint_paths: "model.ckpt-300"
//
// (newest last). It is informative: Latest scans the directory itself, so a
// stale state file (a crash between an index and the state update) misleads
// no one.
const StateFile = "checkpoint"

// fileName matches every file of a checkpoint, temporary files included:
// base, step, kind ("index" or "data-i-of-n"), temporary suffix.
var fileName = regexp.MustCompile(`^(.+)-(\d+)\.(index|data-\d+-of-\d+)(\.tmp\d*)?$`)

// checkPrefix rejects prefixes that would escape the directory or could not
// be found again by Latest.
func checkPrefix(prefix string) error {
	if prefix == "" || strings.ContainsAny(prefix, `/\`) || !fileName.MatchString(prefix+".index") {
		return fmt.Errorf("checkpoint: bad prefix %q: want a base name and a step, like \"model.ckpt-100\"", prefix)
	}
	return nil
}

// ParsePrefix splits a prefix "model.ckpt-100" into its basename and step.
func ParsePrefix(prefix string) (basename string, step int64, err error) {
	if err := checkPrefix(prefix); err != nil {
		return "", 0, err
	}
	m := fileName.FindStringSubmatch(prefix + ".index")
	step, err = strconv.ParseInt(m[2], 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("checkpoint: bad prefix %q: %v", prefix, err)
	}
	return m[1], step, nil
}

// crashPoint, when set (by this package's tests only), is called at each
// point of a save where a crash leaves a different set of files: the crash
// test kills its process there and checks that the previous checkpoint
// still restores.
var crashPoint func(point string)

func atPoint(point string) {
	if crashPoint != nil {
		crashPoint(point)
	}
}

// writeAtomic writes dir/name through a temporary file in dir, synced and
// renamed into place, then syncs dir: after a crash the file is either
// absent (or its previous version) or complete.
//
// The temporary file is locked (flock) from its creation until it is
// renamed, so that retention (of this process or another writing in the
// same directory) leaves it alone while its writer lives, however long
// the writer is stopped: a writer paused mid-save (SIGSTOP) whose
// temporary file another saver deleted as debris failed on resuming
// (rename ...tmp...: no such file or directory). A killed writer's lock
// goes with it, and its debris is deleted as before.
func writeAtomic(dir, name string, write func(io.Writer) error) (err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, name+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	closed := false
	defer func() {
		if !closed {
			f.Close()
		}
		if err != nil {
			os.Remove(tmp)
		}
	}()
	if err = lockFile(f); err != nil {
		return err
	}
	atPoint("created " + tmp)
	bw := bufio.NewWriterSize(f, 1<<16)
	if err = write(bw); err != nil {
		return err
	}
	if err = bw.Flush(); err != nil {
		return err
	}
	atPoint("wrote " + tmp)
	if err = f.Sync(); err != nil {
		return err
	}
	atPoint("synced " + tmp)
	// Renamed while open, so still locked: closing first would unlock it
	// before it has its name.
	if err = os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	closed = true
	if err = f.Close(); err != nil {
		return err
	}
	atPoint("renamed " + name)
	return syncDir(dir)
}

// inUse reports whether path is a temporary file that a live writer holds
// locked (see writeAtomic); retention leaves such a file alone.
func inUse(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	return !tryLock(f)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return err
	}
	return nil
}

// ckptFiles are the files of one checkpoint found in a directory.
type ckptFiles struct {
	prefix   string
	basename string
	step     int64
	index    bool
	files    []string // every file, temporary ones included
}

// scan lists the checkpoints of dir (complete or not), oldest first.
func scan(dir string) ([]*ckptFiles, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: listing %s: %w", dir, err)
	}
	byPrefix := map[string]*ckptFiles{}
	for _, e := range ents {
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil || e.IsDir() {
			continue
		}
		step, err := strconv.ParseInt(m[2], 10, 64)
		if err != nil {
			continue
		}
		prefix := m[1] + "-" + m[2]
		c := byPrefix[prefix]
		if c == nil {
			c = &ckptFiles{prefix: prefix, basename: m[1], step: step}
			byPrefix[prefix] = c
		}
		c.files = append(c.files, e.Name())
		if m[3] == "index" && m[4] == "" {
			c.index = true
		}
	}
	out := make([]*ckptFiles, 0, len(byPrefix))
	for _, c := range byPrefix {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].step != out[j].step {
			return out[i].step < out[j].step
		}
		return out[i].prefix < out[j].prefix
	})
	return out, nil
}

// Latest returns the newest complete and valid checkpoint of dir, of any
// basename: FindLatest(dir, "", slog.Default()).
func Latest(dir string) (prefix string, step int64, err error) {
	return FindLatest(dir, "", nil)
}

// FindLatest returns the prefix and step of the newest checkpoint of dir
// whose basename is basename ("" means any) that is complete and valid: its
// index parses and passes its checksum, and every shard file has the size
// and CRC32C the index records. A checkpoint that fails is skipped, with a
// warning on log (nil means slog.Default()) naming the bad file, for the one
// before it. With none left the error wraps ErrNoCheckpoint. Verifying reads
// every shard file of the checkpoints it looks at.
func FindLatest(dir, basename string, log *slog.Logger) (prefix string, step int64, err error) {
	if log == nil {
		log = slog.Default()
	}
	cks, err := scan(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", 0, fmt.Errorf("checkpoint: %s: %w (no such directory)", dir, ErrNoCheckpoint)
		}
		return "", 0, err
	}
	for i := len(cks) - 1; i >= 0; i-- {
		c := cks[i]
		if basename != "" && c.basename != basename {
			continue
		}
		if !c.index {
			log.Warn("checkpoint: skipping an incomplete checkpoint (no index)", "dir", dir, "prefix", c.prefix, "files", c.files)
			continue
		}
		if err := Verify(dir, c.prefix); err != nil {
			log.Warn("checkpoint: skipping an invalid checkpoint", "dir", dir, "prefix", c.prefix, "err", err)
			continue
		}
		return c.prefix, c.step, nil
	}
	return "", 0, fmt.Errorf("checkpoint: %s: %w", dir, ErrNoCheckpoint)
}

// Verify checks checkpoint prefix of dir as FindLatest does: its index and
// every shard's size and checksum. Its error wraps ErrIncomplete or
// ErrCorrupt and names the bad file.
func Verify(dir, prefix string) error {
	ix, err := ReadIndex(dir, prefix)
	if err != nil {
		return err
	}
	for _, s := range ix.Shards {
		if err := checkShardFile(dir, s); err != nil {
			return err
		}
	}
	return nil
}

// Retain keeps the keep newest valid checkpoints of dir (keep <= 0 keeps
// them all): Retain(dir, keep) is RetainLog(dir, keep, nil).
func Retain(dir string, keep int) error { return RetainLog(dir, keep, nil) }

// RetainLog is RetainCached without a cache: it reads every checkpoint it
// keeps.
func RetainLog(dir string, keep int, log *slog.Logger) error {
	return RetainCached(dir, keep, log, nil)
}

// VerifyCache remembers the checkpoints that passed Verify, with the size
// and modification time of each of their files, so that retention after
// every save reads each checkpoint once instead of once per save (keep
// times the model's size). A checkpoint whose files changed is verified
// again. Damage that changes neither (bit rot under an unchanged inode) is
// caught by FindLatest and Restore, which never use the cache. The zero
// value is ready; it is safe for concurrent use.
type VerifyCache struct {
	mu sync.Mutex
	ok map[string]string // dir/prefix -> stamp of its files
}

// stamp describes files of dir by name, size and modification time.
func stamp(dir string, files []string) (string, error) {
	var b strings.Builder
	for _, f := range slices.Sorted(slices.Values(files)) {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%s:%d:%d;", f, st.Size(), st.ModTime().UnixNano())
	}
	return b.String(), nil
}

// verify is Verify through the cache (nil: no cache).
func (c *VerifyCache) verify(dir string, ck *ckptFiles) error {
	if c == nil {
		return Verify(dir, ck.prefix)
	}
	key := filepath.Join(dir, ck.prefix)
	before, serr := stamp(dir, ck.files)
	c.mu.Lock()
	hit := serr == nil && c.ok[key] == before
	c.mu.Unlock()
	if hit {
		return nil
	}
	if err := Verify(dir, ck.prefix); err != nil {
		return err
	}
	// Remember it only if nothing changed while it was read.
	if after, err := stamp(dir, ck.files); serr == nil && err == nil && after == before {
		c.mu.Lock()
		if c.ok == nil {
			c.ok = map[string]string{}
		}
		c.ok[key] = after
		c.mu.Unlock()
	}
	return nil
}

// forget drops the entries of deleted checkpoints.
func (c *VerifyCache) forget(dir, prefix string) {
	if c != nil {
		c.mu.Lock()
		delete(c.ok, filepath.Join(dir, prefix))
		c.mu.Unlock()
	}
}

// RetainCached keeps the keep newest valid checkpoints of dir (keep <= 0 keeps
// them all) and deletes the rest, and rewrites the state file to list the
// kept ones.
//
// Validity is checked as FindLatest does (Verify reads the index and every
// shard of the checkpoints it looks at), newest first, so that a valid
// checkpoint is never deleted to make room for a corrupt one: a directory
// full of corrupt checkpoints with high step numbers (say, from an earlier
// run whose files were damaged) would otherwise keep those and delete each
// new good one as it is written. In detail:
//
//   - a checkpoint whose index exists but that fails Verify with ErrCorrupt
//     or ErrIncomplete is deleted, with a warning on log (nil means
//     slog.Default()) naming the bad file: it can never be restored;
//   - a checkpoint that cannot be checked for another reason (an I/O error,
//     a permission) is left alone and does not count towards keep;
//   - valid checkpoints beyond the keep newest are deleted, without being
//     read, as are the files of incomplete checkpoints (no index, or
//     temporary files left by crashed writers) older than the newest valid
//     one, and temporary state files. Files of checkpoints newer than the newest valid one that have
//     no index are left alone: they may be in the middle of being written.
//
// cache, if not nil, spares reading again the checkpoints it has seen valid
// (see VerifyCache).
func RetainCached(dir string, keep int, log *slog.Logger, cache *VerifyCache) error {
	if log == nil {
		log = slog.Default()
	}
	cks, err := scan(dir)
	if err != nil {
		return err
	}
	drop := map[*ckptFiles]bool{}
	var kept []*ckptFiles // newest first
	newestValid := int64(-1)
	for i := len(cks) - 1; i >= 0; i-- {
		c := cks[i]
		if !c.index {
			continue
		}
		if keep > 0 && len(kept) >= keep {
			drop[c] = true
			continue
		}
		if err := cache.verify(dir, c); err != nil {
			if errors.Is(err, ErrCorrupt) || errors.Is(err, ErrIncomplete) {
				log.Warn("checkpoint: deleting an invalid checkpoint", "dir", dir, "prefix", c.prefix, "err", err)
				drop[c] = true
			} else {
				log.Warn("checkpoint: could not check a checkpoint; leaving it", "dir", dir, "prefix", c.prefix, "err", err)
			}
			continue
		}
		kept = append(kept, c)
		if newestValid < 0 {
			newestValid = c.step
		}
	}
	for _, c := range cks {
		if !c.index && newestValid >= 0 && c.step < newestValid {
			drop[c] = true
		}
	}
	slices.Reverse(kept)
	// Temporary state files are left by a writer killed mid-write; the
	// state file has one writer (the chief, here or in WriteIndex).
	if stale, _ := filepath.Glob(filepath.Join(dir, StateFile+".tmp*")); len(stale) > 0 {
		for _, f := range stale {
			if !inUse(f) { // another saver's, being written
				os.Remove(f)
			}
		}
	}
	if err := writeState(dir, kept); err != nil {
		return err
	}
	var errs []error
	for _, c := range cks {
		if !drop[c] {
			continue
		}
		cache.forget(dir, c.prefix)
		// The index goes first, so that an interrupted deletion leaves an
		// incomplete checkpoint rather than one with missing shards.
		isIndex := func(f string) bool { return strings.HasSuffix(f, ".index") }
		sort.SliceStable(c.files, func(i, j int) bool { return isIndex(c.files[i]) && !isIndex(c.files[j]) })
		for _, f := range c.files {
			if inUse(filepath.Join(dir, f)) {
				continue // a temporary file its writer still holds
			}
			if err := os.Remove(filepath.Join(dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
			atPoint("removed " + f)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("checkpoint: deleting old checkpoints of %s: %w", dir, errors.Join(errs...))
	}
	return nil
}

// writeState rewrites the state file to list cks (oldest first).
func writeState(dir string, cks []*ckptFiles) error {
	var b strings.Builder
	if len(cks) > 0 {
		fmt.Fprintf(&b, "model_checkpoint_path: %q\n", cks[len(cks)-1].prefix)
	}
	for _, c := range cks {
		fmt.Fprintf(&b, "all_model_checkpoint_paths: %q\n", c.prefix)
	}
	err := writeAtomic(dir, StateFile, func(w io.Writer) error {
		_, err := io.WriteString(w, b.String())
		return err
	})
	if err != nil {
		return fmt.Errorf("checkpoint: writing %s: %w", filepath.Join(dir, StateFile), err)
	}
	return nil
}

// ReadState returns the checkpoints the state file of dir lists, oldest
// first, and its model_checkpoint_path (the newest). A missing state file
// gives no checkpoints and no error.
func ReadState(dir string) (all []string, newest string, err error) {
	data, err := os.ReadFile(filepath.Join(dir, StateFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("checkpoint: %w", err)
	}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		key, val, ok := strings.Cut(line, ":")
		v, qerr := strconv.Unquote(strings.TrimSpace(val))
		if !ok || qerr != nil {
			return nil, "", fmt.Errorf("checkpoint: %s line %d: %w: %q", filepath.Join(dir, StateFile), i+1, ErrCorrupt, line)
		}
		switch key {
		case "model_checkpoint_path":
			newest = v
		case "all_model_checkpoint_paths":
			all = append(all, v)
		}
	}
	return all, newest, nil
}
