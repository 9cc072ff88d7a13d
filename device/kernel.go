package device

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/op"
	"github.com/distflow/distflow/tensor"
)

// Tensor is a value of a device step: in device memory (Buf), or on the
// host (Host) for a kernel's host-memory arguments, such as a Reshape's
// shape or a Shape's result.
type Tensor struct {
	DType tensor.DType
	Shape []int
	// Buf holds the elements, row-major, when Host is nil.
	Buf Buffer
	// Host is the value on the host, or nil.
	Host *tensor.Tensor
}

// NumElements returns the number of elements of t.
func (t *Tensor) NumElements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Bytes returns the size of t's elements in bytes.
func (t *Tensor) Bytes() int64 { return int64(t.NumElements()) * int64(t.DType.Size()) }

// Kernel enqueues the work of one node on a device stream.
type Kernel interface {
	// Launch enqueues the node's computation of c.Outputs from c.Inputs on
	// c.Stream and returns without waiting for it. It writes every element
	// of every device output (they are not zeroed) and sets the Host value
	// of each host-memory output. Errors found on the host are returned;
	// errors of the queued work surface at the stream's Synchronize.
	Launch(c *Context) error
}

// KernelFunc adapts a function to Kernel.
type KernelFunc func(c *Context) error

// Launch calls f.
func (f KernelFunc) Launch(c *Context) error { return f(c) }

// Context is what a kernel sees of one launch.
type Context struct {
	Ctx    context.Context
	Node   *graph.Node
	Device Device
	Stream Stream
	// Inputs are the node's inputs: in device memory, except those the
	// kernel's KernelDef.HostInputs names, which are on the host.
	Inputs []*Tensor
	// Outputs are allocated before Launch with the shapes the op's shape
	// function gave: in device memory, except KernelDef.HostOutputs,
	// whose Host the kernel sets.
	Outputs []*Tensor
	// Scratch allocates temporary device memory, freed once the launch
	// has been queued: the stream orders its reuse after this kernel.
	Scratch func(n int64) (Ptr, error)
	// Hold, when set by the caller of Launch, takes the scratch buffers
	// instead of their being freed: a graph being captured reads them at
	// every replay.
	Hold func(Buffer)
}

// KernelDef is the registration of an op's kernel on a platform.
type KernelDef struct {
	// Factory builds the kernel of a node, checking its attributes once.
	Factory func(n *graph.Node) (Kernel, error)
	// HostInputs are the inputs the kernel reads on the host (a shape, an
	// axis); the runtime copies them there if they are on the device.
	HostInputs []int
	// HostOutputs are the outputs the kernel computes on the host (a
	// Shape's result); they stay there until a device kernel reads them.
	HostOutputs []int
	// DTypes are the element types of the node's (first) output, or of its
	// first input for ops without outputs, that the kernel supports; nil
	// means any.
	DTypes []tensor.DType
	// InputDTypes are the element types of the node's first input that
	// the kernel supports, for a kernel whose input type is not its
	// output's (a comparison's, a cast's); nil means any. Soft placement
	// sends a node of another input type to the CPU rather than fail its
	// launch.
	InputDTypes []tensor.DType
}

// Supports reports whether the kernel supports dt.
func (d KernelDef) Supports(dt tensor.DType) bool {
	return d.DTypes == nil || slices.Contains(d.DTypes, dt)
}

// SupportsInput reports whether the kernel supports a first input of dt.
func (d KernelDef) SupportsInput(dt tensor.DType) bool {
	return d.InputDTypes == nil || slices.Contains(d.InputDTypes, dt)
}

// IsHostInput reports whether input i is read on the host.
func (d KernelDef) IsHostInput(i int) bool { return slices.Contains(d.HostInputs, i) }

// IsHostOutput reports whether output i is computed on the host.
func (d KernelDef) IsHostOutput(i int) bool { return slices.Contains(d.HostOutputs, i) }

type kernelKey struct{ platform, op string }

var (
	kernelsMu sync.RWMutex
	kernels   = map[kernelKey]KernelDef{}
)

// RegisterKernel adds the kernel of op on platform. It panics on a duplicate
// registration or a KernelDef without Factory (programmer errors found at
// init).
func RegisterKernel(platform, op string, def KernelDef) {
	if def.Factory == nil {
		panic(fmt.Sprintf("device.RegisterKernel: %s on %s has no Factory", op, platform))
	}
	kernelsMu.Lock()
	defer kernelsMu.Unlock()
	k := kernelKey{platform, op}
	if _, dup := kernels[k]; dup {
		panic(fmt.Sprintf("device.RegisterKernel: %s on %s registered twice", op, platform))
	}
	kernels[k] = def
}

// LookupKernel returns the kernel registration of op on platform, or an
// error wrapping ErrNoKernel.
func LookupKernel(platform, op string) (KernelDef, error) {
	kernelsMu.RLock()
	defer kernelsMu.RUnlock()
	if d, ok := kernels[kernelKey{platform, op}]; ok {
		return d, nil
	}
	return KernelDef{}, fmt.Errorf("device: %w for op %q on platform %q", ErrNoKernel, op, platform)
}

// Kernels returns the ops with a kernel on platform, sorted.
func Kernels(platform string) []string {
	kernelsMu.RLock()
	defer kernelsMu.RUnlock()
	var ops []string
	for k := range kernels {
		if k.platform == platform {
			ops = append(ops, k.op)
		}
	}
	sort.Strings(ops)
	return ops
}

// Ops are the ops every GPU platform has a kernel for: the forward and
// backward passes of the reference models (linear regression, the MLP, the
// CNN, the dense part of the wide-and-deep model with its binary
// classification head: Concat, Slice and Pad, AddN, the sigmoid
// cross-entropy's Abs, Sign, Maximum, SelectV2 and Softplus, Greater), of
// the layers' models (the recurrent cells' Tanh, TanhGrad, Split and
// Squeeze; the normalizations' Square, Rsqrt and StopGradient; AvgPool and
// AvgPoolGrad; Softmax, LogSoftmax, Exp and Log; the losses'
// SoftmaxCrossEntropyWithLogits, Minimum and LessEqual) and the
// element-wise arithmetic around them, and Gather (an
// embedding's lookup), whose indices the device checks as SparseUpdates
// do: an index out of range gives zeros and a fault, ErrIndexOutOfRange,
// at the stream's next Synchronize. Ops not listed
// (queues, summaries, control flow, the random ops not in Random, and
// variables with the ops that take them by ref unless they are kept in
// device memory: Updates, VariableOps) run on the CPU under soft
// placement. The conformance suite (package device/devicetest) checks a
// platform's kernels of these against the CPU's.
var Ops = []string{
	"Abs", "Add", "AddN", "ArgMax", "AvgPool", "AvgPoolGrad", "BiasAdd", "BiasAddGrad", "BroadcastTo", "Cast", "Concat", "Conv2D",
	"Conv2DBackpropFilter", "Conv2DBackpropInput", "Div", "Equal", "Exp", "ExpandDims", "Fill",
	"Gather", "Greater", "GreaterEqual", "Identity", "Less", "LessEqual", "Log", "LogSoftmax", "MatMul", "MaxPool", "MaxPoolGrad",
	"Maximum", "Mean", "Minimum", "Mul", "Neg", "OnesLike", "Pad", "Relu", "ReluGrad", "Reshape", "Rsqrt", "SelectV2", "Shape",
	"Sigmoid", "SigmoidGrad", "Sign", "Size", "Slice", "Softmax", "SoftmaxCrossEntropyWithLogits", "Softplus",
	"SparseSoftmaxCrossEntropyWithLogits", "Split", "Square", "SquaredDifference", "Squeeze", "StopGradient", "Sub", "Sum",
	"SumToShape", "Tanh", "TanhGrad", "ZerosLike",
}

// Random are the random ops every GPU platform has a kernel for: those
// dropout is built from. Their kernels draw from the Philox stream of
// PhiloxUniform, the same numbers on every platform (not the CPU kernels'
// PCG streams), and keep the count of runs in device memory, advanced by
// the device, so that a step replayed from a captured graph draws fresh
// numbers each replay. The conformance suite checks them against
// PhiloxUniform.
var Random = []string{"RandomUniform"}

// Releaser is a kernel that holds device memory from launch to launch (a
// random op's count of runs). Release frees it once no queued or captured
// work reads it any more; the kernel must not be launched afterwards.
type Releaser interface {
	Release() error
}

// Updates are the optimizers' dense update rules (the ops train's
// optimizers build) that every GPU platform has a kernel for: the kernel
// updates the variable and its slots, its ref inputs, in place in their
// device memory, reading the gradient and the hyper-parameters (device
// scalars) from the others; the ops have no outputs. They are not in Ops,
// and Runs is false for them: they run on a device only next to variables
// kept in its memory (Variables; package device/taskgraph's
// Config.VariablesOnDevice), else with their variables on the host. The
// conformance suite checks these kernels against the CPU's rules, on
// buffers and on variables of a store.
var Updates = []string{"ApplyAdagrad", "ApplyAdam", "ApplyGradientDescent", "ApplyMomentum", "ApplyRMSProp"}

// SparseUpdates are the optimizers' row-wise update rules (train's sparse
// updates of an embedding, whose gradient is the indexed slices of a
// Gather's) that every GPU platform has a kernel for. As Updates, they
// update the variable and its slots, their ref inputs, in place, and run
// on a device only next to variables kept in its memory. The gradient's
// rows of a repeated index are summed first, in the order they come (as
// the CPU's rules do), so that an update with duplicates is the dense
// update of the scattered gradient; then each distinct row is updated
// once. The indices are checked on the device: an index outside the
// variable's rows updates nothing, and the launch's stream fails with an
// error wrapping ErrIndexOutOfRange that names the node, the position and
// the index (at the stream's next Synchronize), never writing outside the
// variable. Until that Synchronize the kernels that write variables on the
// stream (Updates, SparseUpdates, Assign, AssignAdd, AssignSub) write
// nothing, so that a step that failed on a device changes no variable
// after its fault, as a failed step on the CPU changes none. The
// conformance suite checks them against the CPU's rules, with duplicate
// and out-of-range indices.
var SparseUpdates = []string{"SparseApplyAdagrad", "SparseApplyAdam", "SparseApplyGradientDescent", "SparseApplyMomentum"}

// ErrIndexOutOfRange is wrapped by the error of a kernel given an index
// outside the tensor it indexes (a sparse update's row).
var ErrIndexOutOfRange = errors.New("index out of range")

// hostArgs are the arguments of Ops that live in host memory on every
// platform: the shapes and values the runtime needs to infer output shapes
// before a launch, and the results computed from shapes alone.
var hostArgs = map[string]struct{ in, out []int }{
	"Reshape":              {in: []int{1}},
	"BroadcastTo":          {in: []int{1}},
	"SumToShape":           {in: []int{1}},
	"Fill":                 {in: []int{0, 1}},
	"Conv2DBackpropInput":  {in: []int{0}},
	"Conv2DBackpropFilter": {in: []int{1}},
	"AvgPoolGrad":          {in: []int{0}},
	"RandomUniform":        {in: []int{0}},
	"Shape":                {out: []int{0}},
	"Size":                 {out: []int{0}},
}

// HostInputs returns the inputs of op that every platform's kernel reads
// on the host (for KernelDef.HostInputs).
func HostInputs(op string) []int { return hostArgs[op].in }

// HostOutputs returns the outputs of op that every platform's kernel
// computes on the host (for KernelDef.HostOutputs).
func HostOutputs(op string) []int { return hostArgs[op].out }

// ShapeFactory returns the kernel factory, the same on every platform, of
// an op whose outputs are computed on the host from its inputs' shapes
// alone: Shape and Size.
func ShapeFactory(op string) func(n *graph.Node) (Kernel, error) {
	return func(n *graph.Node) (Kernel, error) {
		if op != "Shape" && op != "Size" {
			return nil, fmt.Errorf("device: node %s: %s is not computed from shapes", n, op)
		}
		return KernelFunc(func(c *Context) error {
			out := c.Outputs[0]
			var vals []int64
			if op == "Shape" {
				for _, d := range c.Inputs[0].Shape {
					vals = append(vals, int64(d))
				}
			} else {
				vals = []int64{int64(c.Inputs[0].NumElements())}
			}
			t := tensor.New(out.DType, out.Shape...)
			for i, x := range vals {
				switch out.DType {
				case tensor.Int32:
					t.Int32s()[i] = int32(x)
				case tensor.Int64:
					t.Int64s()[i] = x
				default:
					return fmt.Errorf("device: node %s: %s of type %v", c.Node, op, out.DType)
				}
			}
			out.Host = t
			return nil
		}), nil
	}
}

// Runs reports whether op runs on an accelerator: an op of Ops or Random,
// or one the runtime handles itself there (a Send, Recv, Const,
// Placeholder or NoOp of a device's partition).
func Runs(op string) bool {
	switch op {
	case "Send", "Recv", "Const", "Placeholder", "NoOp":
		return true
	}
	return slices.Contains(Ops, op) || slices.Contains(Random, op)
}

// SparseIndices returns the position of the indices input of op, a sparse
// update (SparseUpdates), or -1 if it has none.
func SparseIndices(name string) int {
	d, ok := op.Lookup(name)
	if !ok {
		return -1
	}
	for i, in := range d.Inputs {
		if in.Name == "indices" {
			return i
		}
	}
	return -1
}

// IndexError is the error of a node (a sparse update, a Gather; node is
// its graph.Node's String) given indices[pos] = index, outside the rows
// rows it indexes: it wraps ErrIndexOutOfRange.
func IndexError(node string, pos, index, rows int64) error {
	return fmt.Errorf("device: node %s: indices[%d] = %d is out of range [0, %d): %w", node, pos, index, rows, ErrIndexOutOfRange)
}
