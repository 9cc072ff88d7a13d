package bundle

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/distflow/distflow/tensor"
)

// indexFormat names the index layout; readers reject others.
const indexFormat = "distflow-checkpoint-1"

// Index is the table of contents of one checkpoint, written last, by the
// chief: a checkpoint is complete once its index exists.
//
// On disk it is JSON: {"crc32c": C, "index": {...}} where C is the CRC32C
// of the bytes of the "index" value exactly as written.
type Index struct {
	Format    string          `json:"format"`
	Step      int64           `json:"step"`
	Time      time.Time       `json:"time"`
	NumShards int             `json:"num_shards"`
	Shards    []ShardInfo     `json:"shards"` // by shard number
	Variables []VariableEntry `json:"variables"`

	prefix string // set by ReadIndex
}

// Lookup returns the entry of the variable called name.
func (ix *Index) Lookup(name string) (VariableEntry, bool) {
	i := sort.Search(len(ix.Variables), func(i int) bool { return ix.Variables[i].Name >= name })
	if i < len(ix.Variables) && ix.Variables[i].Name == name {
		return ix.Variables[i], true
	}
	return VariableEntry{}, false
}

// WriteIndex writes the index of checkpoint prefix (at step) in dir from the
// ShardInfo of every shard (in any order), atomically, then adds the
// checkpoint to the state file. Call it after every WriteShard of the
// checkpoint has returned: it checks that each shard 0..n-1 is there once,
// that no variable is in two shards, and that each data file exists with
// its recorded size.
func WriteIndex(dir, prefix string, step int64, shards []ShardInfo) error {
	if err := checkPrefix(prefix); err != nil {
		return err
	}
	ix := &Index{Format: indexFormat, Step: step, Time: time.Now().UTC(), NumShards: len(shards)}
	ix.Shards = make([]ShardInfo, len(shards))
	seen := make([]bool, len(shards))
	for _, s := range shards {
		if s.NumShards != len(shards) || s.Shard < 0 || s.Shard >= len(shards) || seen[s.Shard] {
			return fmt.Errorf("checkpoint: index of %s: shard %d of %d does not fit %d shards given", prefix, s.Shard, s.NumShards, len(shards))
		}
		if s.File != ShardFile(prefix, s.Shard, s.NumShards) {
			return fmt.Errorf("checkpoint: index of %s: shard %d is file %q, want %q", prefix, s.Shard, s.File, ShardFile(prefix, s.Shard, s.NumShards))
		}
		st, err := os.Stat(filepath.Join(dir, s.File))
		if err != nil {
			return fmt.Errorf("checkpoint: index of %s: %w: %v", prefix, ErrIncomplete, err)
		}
		if st.Size() != s.Size {
			return fmt.Errorf("checkpoint: index of %s: %s: %w: size %d, shard says %d", prefix, s.File, ErrCorrupt, st.Size(), s.Size)
		}
		seen[s.Shard] = true
		ix.Shards[s.Shard] = s
		ix.Variables = append(ix.Variables, s.Variables...)
	}
	sort.Slice(ix.Variables, func(i, j int) bool { return ix.Variables[i].Name < ix.Variables[j].Name })
	for i := 1; i < len(ix.Variables); i++ {
		if ix.Variables[i].Name == ix.Variables[i-1].Name {
			return fmt.Errorf("checkpoint: index of %s: variable %q is in shards %d and %d", prefix,
				ix.Variables[i].Name, ix.Variables[i-1].Shard, ix.Variables[i].Shard)
		}
	}
	// The variables are listed once, in the index; the shards keep only
	// their file facts.
	for i := range ix.Shards {
		ix.Shards[i].Variables = nil
	}
	body, err := json.MarshalIndent(ix, "", "  ")
	if err != nil {
		return fmt.Errorf("checkpoint: index of %s: %w", prefix, err)
	}
	err = writeAtomic(dir, IndexFile(prefix), func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "{\"crc32c\": %d, \"index\": %s}\n", crc32.Checksum(body, castagnoli), body)
		return err
	})
	if err != nil {
		return fmt.Errorf("checkpoint: writing %s: %w", filepath.Join(dir, IndexFile(prefix)), err)
	}
	// Another saver in the directory (a ring's acting leader) may have
	// deleted the shards as an incomplete older checkpoint while the index
	// was being written (its writer stopped): an index without its shards
	// would be a corrupt checkpoint, so it goes again.
	for _, sh := range ix.Shards {
		if _, err := os.Stat(filepath.Join(dir, sh.File)); err != nil {
			os.Remove(filepath.Join(dir, IndexFile(prefix)))
			return fmt.Errorf("checkpoint: index of %s: %w: a shard went while the index was written: %v", prefix, ErrIncomplete, err)
		}
	}
	cks, err := scan(dir)
	if err != nil {
		return err
	}
	var complete []*ckptFiles
	for _, c := range cks {
		if c.index {
			complete = append(complete, c)
		}
	}
	return writeState(dir, complete)
}

// ReadIndex reads and checks the index of checkpoint prefix in dir. A
// missing index wraps ErrIncomplete; one that fails its checksum or does
// not describe a consistent checkpoint wraps ErrCorrupt.
func ReadIndex(dir, prefix string) (*Index, error) {
	if err := checkPrefix(prefix); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, IndexFile(prefix))
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("checkpoint: %s: %w: no index", path, ErrIncomplete)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	var outer struct {
		CRC32C *uint32         `json:"crc32c"`
		Index  json.RawMessage `json:"index"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&outer); err != nil || outer.CRC32C == nil || len(outer.Index) == 0 {
		return nil, fmt.Errorf("checkpoint: %s: %w: index does not parse: %v", path, ErrCorrupt, err)
	}
	if got := crc32.Checksum(outer.Index, castagnoli); got != *outer.CRC32C {
		return nil, fmt.Errorf("checkpoint: %s: %w: crc32c %08x, file says %08x", path, ErrCorrupt, got, *outer.CRC32C)
	}
	var ix Index
	if err := json.Unmarshal(outer.Index, &ix); err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w: %v", path, ErrCorrupt, err)
	}
	if err := ix.check(prefix); err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w: %v", path, ErrCorrupt, err)
	}
	ix.prefix = prefix
	return &ix, nil
}

// check validates the index's internal consistency.
func (ix *Index) check(prefix string) error {
	if ix.Format != indexFormat {
		return fmt.Errorf("format %q, want %q", ix.Format, indexFormat)
	}
	if ix.NumShards != len(ix.Shards) || ix.NumShards <= 0 {
		return fmt.Errorf("%d shards listed for %d", len(ix.Shards), ix.NumShards)
	}
	for i, s := range ix.Shards {
		if s.Shard != i || s.NumShards != ix.NumShards || s.File != ShardFile(prefix, i, ix.NumShards) {
			return fmt.Errorf("shard %d is listed as %d of %d in %q", i, s.Shard, s.NumShards, s.File)
		}
		if s.Size < shardHeaderSize {
			return fmt.Errorf("shard %d has size %d, less than its header", i, s.Size)
		}
	}
	for i, v := range ix.Variables {
		if i > 0 && ix.Variables[i-1].Name >= v.Name {
			return fmt.Errorf("variables are not sorted and distinct at %q", v.Name)
		}
		// Offset+Length could overflow: compare with what the shard has left.
		if v.Shard < 0 || v.Shard >= ix.NumShards || v.Offset < shardHeaderSize || v.Length < recordOverhead ||
			v.Length > ix.Shards[v.Shard].Size || v.Offset > ix.Shards[v.Shard].Size-v.Length {
			return fmt.Errorf("variable %q lies outside its shard %d", v.Name, v.Shard)
		}
		if _, err := tensor.ParseDType(v.DType); err != nil {
			return fmt.Errorf("variable %q: %v", v.Name, err)
		}
	}
	return nil
}

// Read returns every variable of checkpoint prefix in dir, checking each
// record's checksum. Its errors wrap ErrIncomplete or ErrCorrupt and name
// the bad file.
func Read(dir, prefix string) (map[string]*tensor.Tensor, error) {
	return ReadVariables(dir, prefix, nil)
}

// ReadVariables returns the named variables of checkpoint prefix in dir
// (all of them if names is nil), reading only their records, wherever
// they are: this is what lets a cluster with another number of ps tasks
// restore a checkpoint. A name not in the checkpoint wraps ErrNotFound.
func ReadVariables(dir, prefix string, names []string) (map[string]*tensor.Tensor, error) {
	ix, err := ReadIndex(dir, prefix)
	if err != nil {
		return nil, err
	}
	return ix.read(dir, names)
}

// read reads the named variables (all if names is nil) from the shards.
func (ix *Index) read(dir string, names []string) (map[string]*tensor.Tensor, error) {
	entries := ix.Variables
	if names != nil {
		entries = make([]VariableEntry, 0, len(names))
		for _, n := range names {
			e, ok := ix.Lookup(n)
			if !ok {
				return nil, fmt.Errorf("checkpoint: %s: variable %q: %w", filepath.Join(dir, IndexFile(ix.prefix)), n, ErrNotFound)
			}
			entries = append(entries, e)
		}
	}
	out := make(map[string]*tensor.Tensor, len(entries))
	files := map[int]*os.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, e := range entries {
		s := ix.Shards[e.Shard]
		path := filepath.Join(dir, s.File)
		if files[e.Shard] == nil {
			f, err := os.Open(path)
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("checkpoint: %s: %w: shard %d is missing", path, ErrIncomplete, e.Shard)
			}
			if err != nil {
				return nil, fmt.Errorf("checkpoint: %w", err)
			}
			st, err := f.Stat()
			if err == nil && st.Size() != s.Size {
				err = fmt.Errorf("checkpoint: %s: %w: size %d, index says %d", path, ErrCorrupt, st.Size(), s.Size)
			}
			if err == nil {
				var hdr [shardHeaderSize]byte
				if _, rerr := f.ReadAt(hdr[:], 0); rerr != nil || !goodHeader(hdr[:], s) {
					err = fmt.Errorf("checkpoint: %s: %w: bad header", path, ErrCorrupt)
				}
			}
			if err != nil {
				f.Close()
				return nil, err
			}
			files[e.Shard] = f
		}
		t, err := readRecord(files[e.Shard], path, e)
		if err != nil {
			return nil, err
		}
		out[e.Name] = t
	}
	return out, nil
}
