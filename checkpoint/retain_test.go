package checkpoint_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distflow/distflow/checkpoint"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// damageCheckpoint corrupts checkpoint prefix of dir in one of three ways,
// chosen by how: truncate a shard, flip a bit in a shard, or break the index.
func damageCheckpoint(t *testing.T, dir, prefix string, how int) {
	t.Helper()
	file := prefix + ".data-00000-of-00002"
	if how%3 == 2 {
		file = prefix + ".index"
	}
	path := filepath.Join(dir, file)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	switch how % 3 {
	case 0:
		b = b[:len(b)-3]
	case 1:
		b[len(b)-6] ^= 0x40
	case 2:
		b = bytes.Replace(b, []byte(`"crc32c": `), []byte(`"crc32c": 1`), 1)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.Verify(dir, prefix); err == nil {
		t.Fatalf("damaging %s did not make it invalid", file)
	}
}

// TestRetainKeepsValidOverCorrupt checks that retention never deletes good
// progress: with only corrupt checkpoints of high steps in the directory,
// keeping the K highest-numbered ones would delete each new valid
// checkpoint as it is written. Retain must keep the valid ones and delete
// the corrupt ones.
func TestRetainKeepsValidOverCorrupt(t *testing.T) {
	dir := t.TempDir()
	vars := map[string]*tensor.Tensor{"v": tensor.Scalar(float32(1)), "w": tensor.MustFromSlice([]float32{1, 2, 3}, 3)}
	var corrupt []string
	for i, step := range []int64{5000, 5100, 5200, 5300, 5400, 5500} {
		writeCheckpoint(t, dir, step, 2, vars)
		p := checkpoint.Prefix("model.ckpt", step)
		damageCheckpoint(t, dir, p, i)
		corrupt = append(corrupt, p)
	}
	const keep = 3
	var written []string
	for step := int64(100); step <= 600; step += 100 {
		writeCheckpoint(t, dir, step, 2, vars)
		written = append(written, checkpoint.Prefix("model.ckpt", step))
		log, buf := captureLog()
		if err := checkpoint.RetainLog(dir, keep, log); err != nil {
			t.Fatal(err)
		}
		if step == 100 {
			for _, p := range corrupt {
				if !strings.Contains(buf.String(), p) {
					t.Errorf("no warning names the deleted corrupt checkpoint %s:\n%s", p, buf)
				}
			}
		}
		wantKept := written[max(0, len(written)-keep):]
		all, newest, err := checkpoint.ReadState(dir)
		if err != nil || newest != wantKept[len(wantKept)-1] || !slices.Equal(all, wantKept) {
			t.Fatalf("after saving step %d: state lists %v (newest %q, err %v), want %v", step, all, newest, err, wantKept)
		}
		for _, p := range wantKept {
			if err := checkpoint.Verify(dir, p); err != nil {
				t.Errorf("after saving step %d: %s: %v", step, p, err)
			}
		}
		if p, _, err := checkpoint.Latest(dir); p != wantKept[len(wantKept)-1] || err != nil {
			t.Errorf("after saving step %d: Latest = %q, %v", step, p, err)
		}
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		for _, p := range corrupt {
			if strings.HasPrefix(e.Name(), p+".") {
				t.Errorf("corrupt file %s was not deleted", e.Name())
			}
		}
	}
}

// TestRetainLeavesNewerIncomplete: the files of a checkpoint newer than the
// newest valid one and without an index may be a save in progress: kept.
// A corrupt complete checkpoint in between does not change that.
func TestRetainLeavesNewerIncomplete(t *testing.T) {
	dir := t.TempDir()
	vars := map[string]*tensor.Tensor{"v": tensor.Scalar(float32(1))}
	writeCheckpoint(t, dir, 100, 2, vars)
	writeCheckpoint(t, dir, 300, 2, vars)
	damageCheckpoint(t, dir, "model.ckpt-300", 1)
	writeShards(t, dir, "model.ckpt-200", 2, vars) // in progress, newer than the newest valid
	writeShards(t, dir, "model.ckpt-50", 2, vars)  // a crashed save
	if err := checkpoint.RetainLog(dir, 1, quiet); err != nil {
		t.Fatal(err)
	}
	var got []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		got = append(got, e.Name())
	}
	want := []string{"checkpoint",
		"model.ckpt-100.data-00000-of-00002", "model.ckpt-100.data-00001-of-00002", "model.ckpt-100.index",
		"model.ckpt-200.data-00000-of-00002", "model.ckpt-200.data-00001-of-00002"}
	if !slices.Equal(got, want) {
		t.Errorf("files after RetainLog(1):\n got %v\nwant %v", got, want)
	}
}

// TestSaverAfterCorruptDir: the Saver, saving into a directory of corrupt
// checkpoints with higher steps (as in TestRetainKeepsValidOverCorrupt), keeps what it
// saves, and RestoreLatest restores the newest save.
func TestSaverAfterCorruptDir(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	vars := map[string]*tensor.Tensor{"v": tensor.Scalar(float32(1))}
	for i, step := range []int64{900, 901} {
		writeCheckpoint(t, dir, step, 2, vars)
		damageCheckpoint(t, dir, checkpoint.Prefix("model.ckpt", step), i)
	}
	s := graph.NewScope()
	m := buildModel(t, s)
	sv, err := checkpoint.NewSaver(s, nil, checkpoint.SaverConfig{Dir: dir, Keep: 2, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := session.New(s.Graph())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if _, ok, err := sv.RestoreLatest(ctx, sess); ok || err != nil {
		t.Fatalf("RestoreLatest over corrupt checkpoints = %v, %v; want false, nil", ok, err)
	}
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{m.init}); err != nil {
		t.Fatal(err)
	}
	var saved map[string]*tensor.Tensor
	for step := int64(1); step <= 3; step++ {
		saved = m.setValues(t, s, sess, float64(step))
		if _, err := sv.Save(ctx, sess, step); err != nil {
			t.Fatal(err)
		}
	}
	all, _, _ := checkpoint.ReadState(dir)
	if !slices.Equal(all, []string{"model.ckpt-2", "model.ckpt-3"}) {
		t.Errorf("state lists %v, want [model.ckpt-2 model.ckpt-3]", all)
	}
	m.setValues(t, s, sess, -1)
	step, ok, err := sv.RestoreLatest(ctx, sess)
	if step != 3 || !ok || err != nil {
		t.Fatalf("RestoreLatest = %d, %v, %v; want 3, true, nil", step, ok, err)
	}
	checkValues(t, m.values(t, sess), saved)
	if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("model.ckpt-%d.index", 901))); !os.IsNotExist(err) {
		t.Errorf("the corrupt checkpoint 901 is still there (stat err %v)", err)
	}
}

// TestRetainCached: with a VerifyCache, retention reads a checkpoint it has
// seen valid again only when one of its files changed. Damage hidden under
// an unchanged size and modification time is left to FindLatest, which
// never trusts the cache.
func TestRetainCached(t *testing.T) {
	dir := t.TempDir()
	vars := map[string]*tensor.Tensor{"v": tensor.Scalar(float32(1)), "w": tensor.MustFromSlice([]float32{1, 2, 3}, 3)}
	var cache checkpoint.VerifyCache
	for _, step := range []int64{100, 200, 300} {
		writeCheckpoint(t, dir, step, 2, vars)
		if err := checkpoint.RetainCached(dir, 3, quiet, &cache); err != nil {
			t.Fatal(err)
		}
	}
	// Flip a bit of step 300 and put its time back: the cache does not see it.
	shard := filepath.Join(dir, "model.ckpt-300.data-00000-of-00002")
	st, err := os.Stat(shard)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(shard)
	b[len(b)-6] ^= 0x40
	if err := os.WriteFile(shard, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(shard, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.RetainCached(dir, 3, quiet, &cache); err != nil {
		t.Fatal(err)
	}
	if all, _, _ := checkpoint.ReadState(dir); !slices.Equal(all, []string{"model.ckpt-100", "model.ckpt-200", "model.ckpt-300"}) {
		t.Errorf("with the damage hidden from the cache, state lists %v, want all three", all)
	}
	if p, _, err := checkpoint.FindLatest(dir, "", quiet); p != "model.ckpt-200" || err != nil {
		t.Errorf("FindLatest = %q, %v; want model.ckpt-200 (it verifies without the cache)", p, err)
	}
	// A new modification time makes the cache read it again.
	later := st.ModTime().Add(time.Second)
	if err := os.Chtimes(shard, later, later); err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.RetainCached(dir, 3, quiet, &cache); err != nil {
		t.Fatal(err)
	}
	if all, _, _ := checkpoint.ReadState(dir); !slices.Equal(all, []string{"model.ckpt-100", "model.ckpt-200"}) {
		t.Errorf("after the damaged file changed, state lists %v, want 100 and 200", all)
	}
	if _, err := os.Stat(shard); !os.IsNotExist(err) {
		t.Errorf("the corrupt shard is still there (stat err %v)", err)
	}
}
