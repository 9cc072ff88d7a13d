package checkpoint_test

import (
	"bytes"
	"errors"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/distflow/distflow/checkpoint"
	"github.com/distflow/distflow/tensor"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// sampleVars has one variable of every dtype, a scalar and an empty tensor.
func sampleVars() map[string]*tensor.Tensor {
	return map[string]*tensor.Tensor{
		"dense/W":     tensor.MustFromSlice([]float32{1.5, -2, 3.25, 0, 1e-30, -7}, 2, 3),
		"dense/b":     tensor.MustFromSlice([]float64{10, -0.5}, 2),
		"counts":      tensor.MustFromSlice([]int32{1, -2, 1 << 30}, 3),
		"global_step": tensor.Scalar(int64(1234567890123)),
		"mask":        tensor.MustFromSlice([]bool{true, false, true, true}, 2, 2),
		"bytes":       tensor.MustFromSlice([]uint8{0, 255, 7}, 3),
		"empty":       tensor.New(tensor.Float32, 0, 4),
	}
}

// writeCheckpoint writes vars as a checkpoint of step split over numShards
// (by name, round-robin) and its index, and returns the shard infos.
func writeCheckpoint(t *testing.T, dir string, step int64, numShards int, vars map[string]*tensor.Tensor) []checkpoint.ShardInfo {
	t.Helper()
	prefix := checkpoint.Prefix("model.ckpt", step)
	shards := writeShards(t, dir, prefix, numShards, vars)
	if err := checkpoint.WriteIndex(dir, prefix, step, shards); err != nil {
		t.Fatal(err)
	}
	return shards
}

func writeShards(t *testing.T, dir, prefix string, numShards int, vars map[string]*tensor.Tensor) []checkpoint.ShardInfo {
	t.Helper()
	names := make([]string, 0, len(vars))
	for n := range vars {
		names = append(names, n)
	}
	slices.Sort(names)
	parts := make([]map[string]*tensor.Tensor, numShards)
	for i := range parts {
		parts[i] = map[string]*tensor.Tensor{}
	}
	for i, n := range names {
		parts[i%numShards][n] = vars[n]
	}
	var shards []checkpoint.ShardInfo
	for i := numShards - 1; i >= 0; i-- { // any order will do
		info, err := checkpoint.WriteShard(dir, prefix, i, numShards, parts[i])
		if err != nil {
			t.Fatal(err)
		}
		shards = append(shards, info)
	}
	return shards
}

func TestRoundTripAllDTypes(t *testing.T) {
	for _, numShards := range []int{1, 2, 3} {
		dir := t.TempDir()
		vars := sampleVars()
		writeCheckpoint(t, dir, 100, numShards, vars)
		got, err := checkpoint.Read(dir, "model.ckpt-100")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(vars) {
			t.Errorf("%d shards: read %d variables, want %d", numShards, len(got), len(vars))
		}
		for n, want := range vars {
			if !tensor.Equal(got[n], want) {
				t.Errorf("%d shards: %s = %v, want %v", numShards, n, got[n], want)
			}
		}
		some, err := checkpoint.ReadVariables(dir, "model.ckpt-100", []string{"mask", "dense/b"})
		if err != nil || len(some) != 2 || !tensor.Equal(some["mask"], vars["mask"]) {
			t.Errorf("%d shards: ReadVariables(mask, dense/b) = %v, %v", numShards, some, err)
		}
		if _, err := checkpoint.ReadVariables(dir, "model.ckpt-100", []string{"nope"}); !errors.Is(err, checkpoint.ErrNotFound) {
			t.Errorf("%d shards: ReadVariables(nope): err = %v, want ErrNotFound", numShards, err)
		}
		prefix, step, err := checkpoint.Latest(dir)
		if prefix != "model.ckpt-100" || step != 100 || err != nil {
			t.Errorf("%d shards: Latest = %q, %d, %v", numShards, prefix, step, err)
		}
		ix, err := checkpoint.ReadIndex(dir, "model.ckpt-100")
		if err != nil || ix.NumShards != numShards || ix.Step != 100 || len(ix.Variables) != len(vars) {
			t.Errorf("%d shards: ReadIndex = %+v, %v", numShards, ix, err)
		}
	}
}

// TestShardGolden pins the data file layout: the bytes of a shard of the
// sample variables. Run with -update to rewrite testdata/shard.golden.
func TestShardGolden(t *testing.T) {
	dir := t.TempDir()
	info, err := checkpoint.WriteShard(dir, "model.ckpt-7", 0, 1, sampleVars())
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, info.File))
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "shard.golden")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("shard bytes differ from %s (%d bytes, want %d); run with -update if the format changed on purpose", golden, len(got), len(want))
	}
	if info.File != "model.ckpt-7.data-00000-of-00001" || info.Size != int64(len(got)) {
		t.Errorf("info = %s, %d bytes; want model.ckpt-7.data-00000-of-00001, %d", info.File, info.Size, len(got))
	}
}

// captureLog returns a logger writing text records into the returned buffer.
func captureLog() (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return slog.New(slog.NewTextHandler(&buf, nil)), &buf
}

// TestCrashBeforeIndex: shards written but no index (the chief died in
// between), plus a temporary file of a write cut short: Latest skips the
// checkpoint with a warning and returns the previous one.
func TestCrashBeforeIndex(t *testing.T) {
	dir := t.TempDir()
	writeCheckpoint(t, dir, 100, 2, sampleVars())
	writeShards(t, dir, "model.ckpt-200", 2, sampleVars())
	if err := os.WriteFile(filepath.Join(dir, "model.ckpt-300.data-00000-of-00002.tmp123"), []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	log, buf := captureLog()
	prefix, step, err := checkpoint.FindLatest(dir, "model.ckpt", log)
	if prefix != "model.ckpt-100" || step != 100 || err != nil {
		t.Fatalf("FindLatest = %q, %d, %v; want model.ckpt-100", prefix, step, err)
	}
	for _, want := range []string{"level=WARN", "model.ckpt-200", "model.ckpt-300", "incomplete"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, buf)
		}
	}
	if _, err := checkpoint.Read(dir, "model.ckpt-200"); !errors.Is(err, checkpoint.ErrIncomplete) {
		t.Errorf("Read(model.ckpt-200): err = %v, want ErrIncomplete", err)
	}
}

// TestCorruptionDetected damages the newest checkpoint in several ways:
// Latest must fall back to the previous one with a warning naming the bad
// file, and Read must fail with the right sentinel.
func TestCorruptionDetected(t *testing.T) {
	shard0 := "model.ckpt-200.data-00000-of-00002"
	index := "model.ckpt-200.index"
	tests := []struct {
		name    string
		file    string
		damage  func(b []byte) []byte // nil deletes the file
		wantErr error
	}{
		{"truncated shard", shard0, func(b []byte) []byte { return b[:len(b)-5] }, checkpoint.ErrCorrupt},
		{"flipped byte in a value", shard0, func(b []byte) []byte { b[len(b)-6] ^= 0x10; return b }, checkpoint.ErrCorrupt},
		{"flipped byte in the header", shard0, func(b []byte) []byte { b[9] ^= 1; return b }, checkpoint.ErrCorrupt},
		{"missing shard", shard0, nil, checkpoint.ErrIncomplete},
		{"truncated index", index, func(b []byte) []byte { return b[:len(b)/2] }, checkpoint.ErrCorrupt},
		{"flipped digit in the index", index, func(b []byte) []byte {
			i := bytes.Index(b, []byte(`"offset": `)) + len(`"offset": `)
			b[i] = '9' - (b[i] - '0')
			return b
		}, checkpoint.ErrCorrupt},
		{"missing index", index, nil, checkpoint.ErrIncomplete},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeCheckpoint(t, dir, 100, 2, sampleVars())
			writeCheckpoint(t, dir, 200, 2, sampleVars())
			path := filepath.Join(dir, tc.file)
			if tc.damage == nil {
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
			} else {
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, tc.damage(b), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			log, buf := captureLog()
			prefix, step, err := checkpoint.FindLatest(dir, "", log)
			if prefix != "model.ckpt-100" || step != 100 || err != nil {
				t.Fatalf("FindLatest = %q, %d, %v; want model.ckpt-100", prefix, step, err)
			}
			if !strings.Contains(buf.String(), "level=WARN") || !strings.Contains(buf.String(), "model.ckpt-200") {
				t.Errorf("no warning naming the bad checkpoint:\n%s", buf)
			}
			if tc.damage != nil && !strings.Contains(buf.String(), tc.file) {
				t.Errorf("the warning does not name %s:\n%s", tc.file, buf)
			}
			_, err = checkpoint.Read(dir, "model.ckpt-200")
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("Read: err = %v, want %v", err, tc.wantErr)
			}
			if err := checkpoint.Verify(dir, "model.ckpt-200"); !errors.Is(err, tc.wantErr) {
				t.Errorf("Verify: err = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestLatestNone(t *testing.T) {
	for name, dir := range map[string]string{"empty": t.TempDir(), "missing": filepath.Join(t.TempDir(), "nope")} {
		if _, _, err := checkpoint.Latest(dir); !errors.Is(err, checkpoint.ErrNoCheckpoint) {
			t.Errorf("%s dir: err = %v, want ErrNoCheckpoint", name, err)
		}
	}
}

func TestRetain(t *testing.T) {
	dir := t.TempDir()
	vars := map[string]*tensor.Tensor{"v": tensor.Scalar(float32(1))}
	for step := int64(1); step <= 6; step++ {
		writeCheckpoint(t, dir, step*100, 2, vars)
	}
	writeShards(t, dir, "model.ckpt-150", 2, vars) // a crashed save, older than the newest
	writeShards(t, dir, "model.ckpt-700", 2, vars) // a save in progress
	if err := checkpoint.Retain(dir, 3); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	want := []string{"checkpoint"}
	for _, p := range []string{"model.ckpt-400", "model.ckpt-500", "model.ckpt-600"} {
		want = append(want, p+".data-00000-of-00002", p+".data-00001-of-00002", p+".index")
	}
	want = append(want, "model.ckpt-700.data-00000-of-00002", "model.ckpt-700.data-00001-of-00002")
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("files after Retain(3):\n got %v\nwant %v", got, want)
	}
	all, newest, err := checkpoint.ReadState(dir)
	if err != nil || newest != "model.ckpt-600" || !slices.Equal(all, []string{"model.ckpt-400", "model.ckpt-500", "model.ckpt-600"}) {
		t.Errorf("ReadState = %v, %q, %v", all, newest, err)
	}
}

func TestBadArguments(t *testing.T) {
	dir := t.TempDir()
	vars := map[string]*tensor.Tensor{"v": tensor.Scalar(float32(1))}
	if _, err := checkpoint.WriteShard(dir, "model.ckpt-1", 2, 2, vars); err == nil {
		t.Error("WriteShard accepted shard 2 of 2")
	}
	if _, err := checkpoint.WriteShard(dir, "../escape-1", 0, 1, vars); err == nil {
		t.Error("WriteShard accepted a prefix with a path separator")
	}
	if _, err := checkpoint.WriteShard(dir, "nostep", 0, 1, vars); err == nil {
		t.Error("WriteShard accepted a prefix without a step")
	}
	a, err := checkpoint.WriteShard(dir, "model.ckpt-1", 0, 2, vars)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.WriteIndex(dir, "model.ckpt-1", 1, []checkpoint.ShardInfo{a}); err == nil {
		t.Error("WriteIndex accepted 1 of 2 shards")
	}
	b, err := checkpoint.WriteShard(dir, "model.ckpt-1", 1, 2, vars)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.WriteIndex(dir, "model.ckpt-1", 1, []checkpoint.ShardInfo{a, b}); err == nil || !strings.Contains(err.Error(), `"v"`) {
		t.Errorf("WriteIndex with v in two shards: err = %v", err)
	}
	if base, step, err := checkpoint.ParsePrefix("model.ckpt-42"); base != "model.ckpt" || step != 42 || err != nil {
		t.Errorf("ParsePrefix = %q, %d, %v", base, step, err)
	}
}
