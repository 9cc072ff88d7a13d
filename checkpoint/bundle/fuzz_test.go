package bundle_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/distflow/distflow/checkpoint/bundle"
	"github.com/distflow/distflow/internal/fuzztest"
	"github.com/distflow/distflow/tensor"
)

const fuzzPrefix = "model.ckpt-7"

// fuzzCheckpoint writes a real two-shard checkpoint in dir and returns the
// bytes of its index and of its two data files.
func fuzzCheckpoint(tb testing.TB, dir string) (index, data0, data1 []byte) {
	shards := []map[string]*tensor.Tensor{
		{"a": tensor.MustFromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3), "c": tensor.MustFromSlice([]bool{true, false, true, true}, 4)},
		{"b": tensor.MustFromSlice([]int64{-9}), "d": tensor.New(tensor.Uint8, 0)},
	}
	var infos []bundle.ShardInfo
	for i, vars := range shards {
		si, err := bundle.WriteShard(dir, fuzzPrefix, i, len(shards), vars)
		if err != nil {
			tb.Fatal(err)
		}
		infos = append(infos, si)
	}
	if err := bundle.WriteIndex(dir, fuzzPrefix, 7, infos); err != nil {
		tb.Fatal(err)
	}
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			tb.Fatal(err)
		}
		return b
	}
	return read(bundle.IndexFile(fuzzPrefix)), read(bundle.ShardFile(fuzzPrefix, 0, 2)), read(bundle.ShardFile(fuzzPrefix, 1, 2))
}

var quiet = slog.New(slog.DiscardHandler)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// fixIndex makes a fuzzed index pass its checksums, so that the fuzzer
// reaches the consistency checks and the record reader: the shards' sizes
// and whole-file CRCs are set to those of data, then the index's own CRC.
// An index that does not parse is returned as is.
func fixIndex(index []byte, data ...[]byte) []byte {
	var outer struct {
		Index json.RawMessage `json:"index"`
	}
	if json.Unmarshal(index, &outer) != nil {
		return index
	}
	var ix map[string]any
	dec := json.NewDecoder(bytes.NewReader(outer.Index))
	dec.UseNumber()
	if dec.Decode(&ix) != nil {
		return index
	}
	if shards, ok := ix["shards"].([]any); ok {
		for i, s := range shards {
			if m, ok := s.(map[string]any); ok && i < len(data) {
				m["size"] = len(data[i])
				m["crc32c"] = crc32.Checksum(data[i], castagnoli)
			}
		}
	}
	body, err := json.Marshal(ix)
	if err != nil {
		return index
	}
	return fmt.Appendf(nil, `{"crc32c": %d, "index": %s}`, crc32.Checksum(body, castagnoli), body)
}

// FuzzReadCheckpoint reads a checkpoint directory whose index and data
// files are fuzzed, as a restoring task does with what it finds on disk:
// ReadIndex, Read, ReadVariables, Verify and FindLatest must fail with the
// package's sentinels or return variables that agree with the index, and
// must not allocate beyond what the files hold. With fix set, the index's
// checksums are made right first, so that mutations reach the checks behind
// them. The directory is reused across inputs: one per fuzzing process.
func FuzzReadCheckpoint(f *testing.F) {
	index, data0, data1 := fuzzCheckpoint(f, f.TempDir())
	fuzztest.WriteSeeds(f, "FuzzReadCheckpoint", func() map[string][]any {
		flip := bytes.Clone(data1)
		flip[len(flip)-5] ^= 1
		// An offset near MaxInt64 once passed the bounds check by
		// overflowing Offset+Length, and a length of 1 TiB was allocated.
		overflow := bytes.Replace(index, []byte("\"offset\": 24,\n      \"length\": 42"), []byte("\"offset\": 9223370937343148131,\n      \"length\": 1099511627776"), 1)
		return map[string][]any{
			"valid":           {index, data0, data1, false},
			"valid_fixed":     {index, data0, data1, true},
			"no_index":        {[]byte{}, data0, data1, false},
			"truncated_index": {index[:len(index)/2], data0, data1, false},
			"truncated_data":  {index, data0[:len(data0)-7], data1, true},
			"flipped_data":    {index, data0, flip, true},
			"empty_data":      {index, []byte{}, []byte{}, true},
			"offset_overflow": {overflow, data0, data1, true},
			"negative_size":   {bytes.Replace(index, []byte(`"num_shards": 2`), []byte(`"num_shards": -1`), 1), data0, data1, true},
		}
	})
	dir := f.TempDir()
	paths := []string{
		filepath.Join(dir, bundle.IndexFile(fuzzPrefix)),
		filepath.Join(dir, bundle.ShardFile(fuzzPrefix, 0, 2)),
		filepath.Join(dir, bundle.ShardFile(fuzzPrefix, 1, 2)),
	}
	f.Fuzz(func(t *testing.T, index, data0, data1 []byte, fix bool) {
		if fix {
			index = fixIndex(index, data0, data1)
		}
		for i, b := range [][]byte{index, data0, data1} {
			if len(b) == 0 {
				os.Remove(paths[i]) // a missing file
				continue
			}
			if err := os.WriteFile(paths[i], b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		sentinel := func(what string, err error) {
			if err != nil && !errors.Is(err, bundle.ErrCorrupt) && !errors.Is(err, bundle.ErrIncomplete) &&
				!errors.Is(err, bundle.ErrNotFound) && !errors.Is(err, bundle.ErrNoCheckpoint) {
				t.Fatalf("%s: error %v wraps no sentinel", what, err)
			}
		}
		limit := uint64(64*(len(index)+len(data0)+len(data1))) + 1<<20
		var (
			ix   *bundle.Index
			vars map[string]*tensor.Tensor
			err  error
		)
		fuzztest.CheckAlloc(t, limit, func() { ix, err = bundle.ReadIndex(dir, fuzzPrefix) })
		sentinel("ReadIndex", err)
		fuzztest.CheckAlloc(t, limit, func() { vars, err = bundle.Read(dir, fuzzPrefix) })
		sentinel("Read", err)
		if err == nil {
			if ix == nil {
				t.Fatal("Read succeeded where ReadIndex failed")
			}
			for name, v := range vars {
				e, ok := ix.Lookup(name)
				if !ok || e.DType != v.DType().String() || !equalInts(e.Shape, v.Shape()) {
					t.Fatalf("variable %q %v%v does not agree with its entry %+v", name, v.DType(), v.Shape(), e)
				}
			}
		}
		_, err = bundle.ReadVariables(dir, fuzzPrefix, []string{"b", "c"})
		sentinel("ReadVariables", err)
		sentinel("Verify", bundle.Verify(dir, fuzzPrefix))
		_, _, err = bundle.FindLatest(dir, "model.ckpt", quiet)
		sentinel("FindLatest", err)
	})
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
