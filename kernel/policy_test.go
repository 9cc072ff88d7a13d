package kernel

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/distflow/distflow/tensor"
)

func TestCheckPath(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "sub"), filepath.Join(outside, "in")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "nothing", "yet"), filepath.Join(root, "dangling")); err != nil {
		t.Fatal(err)
	}
	r := NewResources()
	if err := r.SetPolicy(Policy{ConfineFiles: true, FileRoots: []string{root}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{root, true},
		{filepath.Join(root, "a", "b"), true},
		{filepath.Join(root, "a", "..", "b"), true},
		{filepath.Join(outside, "in", "x"), true}, // a link from elsewhere into the root
		{filepath.Join(root, ".."), false},
		{filepath.Join(root, "..", filepath.Base(root)+"x"), false},
		{filepath.Join(root, "out"), false},
		{filepath.Join(root, "out", "new", "dirs"), false},
		{filepath.Join(root, "dangling"), false},
		{filepath.Join(root, "dangling", "x"), false},
		{"/etc/x", false},
		{"../../x", false},
		{"", false},
	} {
		_, err := r.CheckPath(tc.path)
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, ErrFileAccess) {
			t.Errorf("CheckPath(%q) = %v, want ok=%v", tc.path, err, tc.ok)
		}
	}
	if err := r.SetPolicy(Policy{ConfineFiles: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CheckPath(root); !errors.Is(err, ErrFileAccess) {
		t.Errorf("no roots: %v", err)
	}
	if _, err := NewResources().CheckPath("/etc/x"); err != nil {
		t.Errorf("the zero policy confines nothing: %v", err)
	}
}

func TestAllocOverBudgetPanicsWithTheError(t *testing.T) {
	r := NewResources()
	if err := r.SetPolicy(Policy{MaxTensorBytes: 64}); err != nil {
		t.Fatal(err)
	}
	c := &Context{Resources: r, Outputs: make([]*tensor.Tensor, 1)}
	c.Alloc(0, tensor.Float32, 4, 4) // 64 bytes: fine
	defer func() {
		err := RecoveredError(recover())
		if !errors.Is(err, ErrOverBudget) {
			t.Errorf("recovered %v, want ErrOverBudget", err)
		}
	}()
	c.Alloc(0, tensor.Float32, 1<<40, 1<<40) // overflows int64 bytes too
	t.Error("Alloc did not refuse")
}
