package kernel

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/distflow/distflow/tensor"
)

// Sentinel errors of a Policy's checks.
var (
	// ErrOverBudget is wrapped by the error of a kernel that asked for a
	// tensor larger than Policy.MaxTensorBytes, and of a fed tensor or a
	// graph whose declared output is larger. Nothing was allocated.
	ErrOverBudget = errors.New("tensor larger than the task's memory budget")
	// ErrFileAccess is wrapped by the error of a file-touching kernel
	// (SaveVariables, RestoreVariables) whose path is outside the task's
	// Policy.FileRoots, or that runs where file ops are refused.
	ErrFileAccess = errors.New("file access refused")
)

// Policy confines what the graphs run with a Resources may make the
// process do. The zero Policy confines nothing: it is the policy of a
// session's own resources (session.New), whose graphs come from the program
// itself. A worker sets a confining one (worker.Config), since its graphs
// arrive from other processes.
type Policy struct {
	// ConfineFiles makes file-touching kernels check their paths: a path is
	// allowed only under one of FileRoots (after making it absolute,
	// cleaning it and resolving the symlinks of its existing prefix), so
	// "..", absolute paths elsewhere and symlinks that leave the roots are
	// refused; with no FileRoots, every file op is refused.
	ConfineFiles bool
	// FileRoots are the directories (and their subdirectories) file ops may
	// read and write under when ConfineFiles is set.
	FileRoots []string
	// MaxTensorBytes bounds every tensor a kernel allocates through
	// Context.Alloc (so every output of a shape-taking op: Fill, the random
	// ops, OneHot, Tile, Pad, BroadcastTo, and of broadcasting or matrix
	// ops whose output outgrows their inputs): a larger request fails the
	// node with an error wrapping ErrOverBudget before anything is
	// allocated. It is a bound per tensor, not on the sum of live tensors.
	// 0 means no bound.
	MaxTensorBytes int64
	// RefuseNonFiniteWrites makes every kernel that writes a float
	// variable (Assign, AssignAdd, AssignSub, the Apply* and SparseApply*
	// updates) refuse a write that would leave a NaN or an infinity in the
	// variable or one of its slots, whatever the graph's shape: a value fed
	// or computed (an Identity of a feed, a Const, 0/0), a gradient, a
	// hyperparameter, or an update whose finite inputs overflow. The
	// kernel fails with an error wrapping ErrNonFiniteWrite that names the
	// variable and the input or element, and the variable keeps its value.
	// A worker sets it: its graphs come from other processes, and a
	// non-finite value in a parameter server's variable would make every
	// replica's training fail later, far from its cause. Gradient descent
	// and Adam (float32) are checked by a vectorised pass that computes
	// what they would write, before they write; the other updates run
	// their rule first on copies, a chunk at a time, and write only when
	// every result is finite.
	RefuseNonFiniteWrites bool
}

// ErrNonFiniteWrite is wrapped by the error of a write refused by
// Policy.RefuseNonFiniteWrites.
var ErrNonFiniteWrite = errors.New("non-finite value written into a variable")

// policyState is a Policy with its roots resolved once.
type policyState struct {
	p     Policy
	roots []string // absolute, cleaned, symlinks of the existing prefix resolved
}

// SetPolicy sets the policy of the graphs run with r from now on. Kernels
// read it at each step, so it may be set before or after graphs run.
func (r *Resources) SetPolicy(p Policy) error {
	st := &policyState{p: p}
	for _, root := range p.FileRoots {
		if root == "" {
			return errors.New("kernel: policy: an empty file root")
		}
		abs, err := resolvePath(root)
		if err != nil {
			return fmt.Errorf("kernel: policy: file root %q: %w", root, err)
		}
		st.roots = append(st.roots, abs)
	}
	r.policy.Store(st)
	r.maxTensorBytes.Store(p.MaxTensorBytes)
	r.refuseNonFinite.Store(p.RefuseNonFiniteWrites)
	return nil
}

// Policy returns r's policy (the zero Policy unless SetPolicy was called).
func (r *Resources) Policy() Policy {
	if st := r.policy.Load(); st != nil {
		return st.p
	}
	return Policy{}
}

// CheckPath checks that a file op may touch path under r's policy and
// returns it resolved (absolute, clean; the path itself when the policy
// does not confine files). Its error wraps ErrFileAccess and names the path
// and the allowed directories. r may be nil (no confinement).
func (r *Resources) CheckPath(path string) (string, error) {
	var st *policyState
	if r != nil {
		st = r.policy.Load()
	}
	if st == nil || !st.p.ConfineFiles {
		return path, nil
	}
	if len(st.roots) == 0 {
		return "", fmt.Errorf("%w: %q: this task allows no file access to the graphs it runs (no file roots configured)", ErrFileAccess, path)
	}
	abs, err := resolvePath(path)
	if err != nil {
		return "", fmt.Errorf("%w: %q: %v", ErrFileAccess, path, err)
	}
	for _, root := range st.roots {
		if within(root, abs) {
			return abs, nil
		}
	}
	return "", fmt.Errorf("%w: %q (resolved to %q) is outside the allowed directories %s", ErrFileAccess, path, abs, strings.Join(st.roots, ", "))
}

// resolvePath makes p absolute and clean and resolves the symlinks of its
// longest existing prefix (the rest does not exist yet, so it cannot be a
// link).
func resolvePath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	dir, rest := abs, ""
	for {
		real, err := filepath.EvalSymlinks(dir)
		if err == nil {
			return filepath.Join(real, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		if _, lerr := os.Lstat(dir); lerr == nil {
			// dir exists but does not resolve: a dangling symlink, which
			// creating files through would follow wherever it points.
			return "", fmt.Errorf("%s is a dangling symlink", dir)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return abs, nil
		}
		rest = filepath.Join(filepath.Base(dir), rest)
		dir = parent
	}
}

// within reports whether p is root or below it; both are absolute and clean.
func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// CheckTensorBytes reports an error wrapping ErrOverBudget when a tensor of
// dtype dt and the given shape would exceed r's Policy.MaxTensorBytes (also
// when its size overflows). what names the tensor ("node x output 0",
// "feed y:0"). r may be nil (no bound).
func (r *Resources) CheckTensorBytes(what string, dt tensor.DType, shape []int) error {
	if r == nil {
		return nil
	}
	limit := r.maxTensorBytes.Load()
	if limit <= 0 {
		return nil
	}
	if n, ok := tensorBytes(dt, shape); ok && n <= limit {
		return nil
	}
	// A copy, so that shape does not escape to the heap in the callers'
	// common case.
	return overBudget(what, dt, slices.Clone(shape), limit)
}

// tensorBytes returns the size of a tensor, and false when it overflows.
func tensorBytes(dt tensor.DType, shape []int) (int64, bool) {
	n := int64(dt.Size())
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
		if d != 0 && n > (1<<62)/int64(d) {
			return 0, false
		}
		n *= int64(d)
	}
	return n, true
}

func overBudget(what string, dt tensor.DType, shape []int, limit int64) error {
	size := "more than 4 EiB"
	if n, ok := tensorBytes(dt, shape); ok {
		size = fmt.Sprintf("%d bytes", n)
	}
	return fmt.Errorf("%w: %s: %v%v is %s, limit %d bytes", ErrOverBudget, what, dt, shape, size, limit)
}

// budgetPanic is what Context.Alloc panics with when a request exceeds the
// budget; the executor recovers it as the node's error (Alloc has no error
// result, and every kernel allocates through it).
type budgetPanic struct{ err error }

// RecoveredError returns the error a kernel's panic value p carries when
// p is Alloc's refusal of an over-budget tensor, else nil. The executor
// calls it from its recover.
func RecoveredError(p any) error {
	if b, ok := p.(budgetPanic); ok {
		return b.err
	}
	return nil
}

// policyFields are the Resources fields of the policy, read on hot paths
// without the lock.
type policyFields struct {
	policy          atomic.Pointer[policyState]
	maxTensorBytes  atomic.Int64
	refuseNonFinite atomic.Bool
}

// RefusesNonFinite reports whether the kernel being computed must refuse
// to leave a NaN or an infinity in a variable (Policy.RefuseNonFiniteWrites).
func (c *Context) RefusesNonFinite() bool {
	return c.Resources != nil && c.Resources.refuseNonFinite.Load()
}
