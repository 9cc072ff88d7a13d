package cpu

import (
	"encoding/json"
	"fmt"

	"github.com/distflow/distflow/checkpoint/bundle"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/tensor"
)

// Kernels of the checkpoint ops. They read and write files in the node's
// "dir" attribute on the task that runs them, so a cluster whose tasks run
// on several machines needs that directory on a shared filesystem. The
// directory is checked against the task's kernel.Policy (a worker allows
// only its file roots) before anything is read or written. They
// declare MayBlock: disk I/O with fsync can be slow, and should not hold a
// slot of the executor's pool.

func init() {
	kernel.Register("SaveVariables", kernel.CPU, func(n *graph.Node) (kernel.Kernel, error) {
		k := &checkpointSaveKernel{
			dir: n.AttrString("dir"), basename: n.AttrString("basename"),
			shard: n.AttrInt("shard"), numShards: n.AttrInt("num_shards"),
		}
		if k.dir == "" || k.numShards <= 0 || k.shard < 0 || k.shard >= k.numShards {
			return nil, fmt.Errorf("kernel: node %s: bad dir %q or shard %d of %d", n, k.dir, k.shard, k.numShards)
		}
		return k, nil
	})
	kernel.Register("RestoreVariables", kernel.CPU, func(n *graph.Node) (kernel.Kernel, error) {
		k := &checkpointRestoreKernel{dir: n.AttrString("dir"), basename: n.AttrString("basename")}
		if k.dir == "" {
			return nil, fmt.Errorf("kernel: node %s: attribute dir is empty", n)
		}
		return k, nil
	})
}

type checkpointSaveKernel struct {
	dir, basename    string
	shard, numShards int
}

// MayBlock reports that the kernel does disk I/O.
func (*checkpointSaveKernel) MayBlock() bool { return true }

// BorrowsInputs reports that the step input is only read.
func (*checkpointSaveKernel) BorrowsInputs() bool { return true }

func (k *checkpointSaveKernel) Compute(c *kernel.Context) error {
	step, err := checkpointStep(c)
	if err != nil {
		return err
	}
	vars := make(map[string]*tensor.Tensor, len(c.Refs)-1)
	for i := 1; i < len(c.Refs); i++ {
		v := c.Ref(i)
		if _, dup := vars[v.Name()]; dup {
			return c.Errorf("variable %q is listed twice", v.Name())
		}
		t, err := v.Read()
		if err != nil {
			return checkpointWrap(c, "saving", err)
		}
		vars[v.Name()] = t
	}
	dir, err := c.Resources.CheckPath(k.dir)
	if err != nil {
		return checkpointWrap(c, "saving", err)
	}
	info, err := bundle.WriteShard(dir, bundle.Prefix(k.basename, step), k.shard, k.numShards, vars)
	if err != nil {
		return checkpointWrap(c, "", err)
	}
	data, err := json.Marshal(info)
	if err != nil {
		return checkpointWrap(c, "encoding the shard description", err)
	}
	out := c.AllocUninit(0, tensor.Uint8, len(data))
	copy(out.Uint8s(), data)
	return nil
}

type checkpointRestoreKernel struct{ dir, basename string }

// MayBlock reports that the kernel does disk I/O.
func (*checkpointRestoreKernel) MayBlock() bool { return true }

// BorrowsInputs reports that the step input is only read.
func (*checkpointRestoreKernel) BorrowsInputs() bool { return true }

func (k *checkpointRestoreKernel) Compute(c *kernel.Context) error {
	step, err := checkpointStep(c)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(c.Refs)-1)
	for i := 1; i < len(c.Refs); i++ {
		names = append(names, c.Ref(i).Name())
	}
	dir, err := c.Resources.CheckPath(k.dir)
	if err != nil {
		return checkpointWrap(c, "restoring", err)
	}
	vals, err := bundle.ReadVariables(dir, bundle.Prefix(k.basename, step), names)
	if err != nil {
		return checkpointWrap(c, "", err)
	}
	for i := 1; i < len(c.Refs); i++ {
		v := c.Ref(i)
		if err := v.Assign(vals[v.Name()]); err != nil {
			return checkpointWrap(c, "restoring from "+bundle.Prefix(k.basename, step), err)
		}
	}
	return nil
}

// checkpointStep returns the scalar int64 step input.
func checkpointStep(c *kernel.Context) (int64, error) {
	t := c.Input(0)
	if t == nil || t.DType() != tensor.Int64 || t.NumElements() != 1 {
		return 0, c.Errorf("step must be an int64 scalar, got %v", t)
	}
	step := t.Int64s()[0]
	if step < 0 {
		return 0, c.Errorf("step %d is negative", step)
	}
	return step, nil
}

// checkpointWrap wraps err, naming the node (kernel.Context.Errorf does not
// wrap, and callers test for bundle.ErrCorrupt (checkpoint.ErrCorrupt) and friends).
func checkpointWrap(c *kernel.Context, what string, err error) error {
	if what != "" {
		return fmt.Errorf("kernel: node %s: %s: %w", c.Node, what, err)
	}
	return fmt.Errorf("kernel: node %s: %w", c.Node, err)
}
