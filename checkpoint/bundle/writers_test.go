//go:build unix

package bundle

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSaverPausedMidSaveSurvivesAnotherSaver: two savers in one directory,
// as a ring's leader paused (SIGSTOP) in the middle of a save while
// another rank leads and saves newer checkpoints. The paused save is held
// at each point of a save where a temporary file of its exists; meanwhile
// the other saves steps 200 and 300 with retention; then the first goes
// on. Its save must succeed (before the temporary files were locked, the
// other's retention deleted them as debris and the first failed with
// "rename ...tmp...: no such file or directory"), and the newest valid
// checkpoint must be the other's 300.
func TestSaverPausedMidSaveSurvivesAnotherSaver(t *testing.T) {
	// The points of a save of step 100 at which a temporary file exists.
	var points []string
	crashPoint = func(p string) {
		if (strings.HasPrefix(p, "created ") || strings.HasPrefix(p, "wrote ") || strings.HasPrefix(p, "synced ")) && strings.Contains(p, "model.ckpt-100") {
			points = append(points, p)
		}
	}
	if err := saveStep(t.TempDir(), 100, 1); err != nil {
		t.Fatal(err)
	}
	crashPoint = nil
	if len(points) < 6 {
		t.Fatalf("only %d points with a temporary file: %q", len(points), points)
	}
	for _, at := range points {
		// The temporary file's name differs from run to run: match the
		// point by its kind and file.
		kind, file, _ := strings.Cut(at, " ")
		file = file[strings.LastIndexByte(file, '/')+1:]
		file, _, _ = strings.Cut(file, ".tmp")
		t.Run(kind+" "+file, func(t *testing.T) {
			dir := t.TempDir()
			reached, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			crashPoint = func(p string) {
				k, f, _ := strings.Cut(p, " ")
				if k == kind && strings.Contains(f, "/"+file+".tmp") {
					once.Do(func() {
						close(reached)
						<-release
					})
				}
			}
			defer func() { crashPoint = nil }()
			paused := make(chan error, 1)
			go func() { paused <- saveStep(dir, 100, 1) }()
			select {
			case <-reached:
			case <-time.After(10 * time.Second):
				t.Fatalf("the save of step 100 never reached %q", at)
			}
			for _, step := range []int64{200, 300} {
				if err := saveStep(dir, step, float32(step)); err != nil {
					t.Fatalf("the other saver, step %d: %v", step, err)
				}
			}
			close(release)
			err := <-paused
			// Paused before any file of its checkpoint was complete, the save
			// must succeed. Paused later, the other's retention may have
			// deleted its finished shards as an incomplete older checkpoint:
			// then the save fails as incomplete (checkpoint.Saver.Save
			// sees the newer checkpoint and carries on) and leaves no index
			// without its shards.
			early := strings.Contains(file, "data-00000")
			if err != nil && (early || !errors.Is(err, ErrIncomplete)) {
				t.Errorf("the save paused at %q failed once resumed: %v", at, err)
			}
			if err != nil {
				if _, serr := os.Stat(filepath.Join(dir, IndexFile("model.ckpt-100"))); serr == nil {
					t.Errorf("the save paused at %q left an index without its shards", at)
				}
			}
			if _, step, err := Latest(dir); err != nil || step != 300 {
				t.Errorf("Latest = %d, %v; want the other's 300", step, err)
			}
		})
	}
}
