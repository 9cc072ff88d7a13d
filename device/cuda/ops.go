package cuda

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/op"
	"github.com/distflow/distflow/tensor"
)

// launchFunc is the host side of one launch: it checks the inputs,
// plans, and enqueues on l.
type launchFunc func(c *device.Context, l launcher) error

// opDef is an op's CUDA kernel: its factory reads the node's attributes
// once and returns the launch.
type opDef struct {
	dtypes  []tensor.DType
	factory func(n *graph.Node) (launchFunc, error)
}

// inputTypes are the first input's types of the kernels whose input type
// is not their output's (device.KernelDef.InputDTypes).
var inputTypes = map[string][]tensor.DType{
	"Greater": numeric, "GreaterEqual": numeric, "Less": numeric, "LessEqual": numeric, "Equal": equalTypes,
	"ArgMax": numeric, "Cast": castTypes,
}

var (
	f32      = []tensor.DType{tensor.Float32}
	numeric  = []tensor.DType{tensor.Float32, tensor.Int32, tensor.Int64}
	boolOut  = []tensor.DType{tensor.Bool}
	indexOut = []tensor.DType{tensor.Int32, tensor.Int64}
	// equalTypes are Equal's inputs; castTypes Cast's, in and out.
	equalTypes = []tensor.DType{tensor.Float32, tensor.Int32, tensor.Int64, tensor.Bool}
	castTypes  = []tensor.DType{tensor.Float32, tensor.Int32, tensor.Int64, tensor.Bool}
)

// simple wraps a launch that needs no attributes.
func simple(f launchFunc) func(*graph.Node) (launchFunc, error) {
	return func(*graph.Node) (launchFunc, error) { return f, nil }
}

// ops are the kernels of every op of device.Ops but Shape and Size, which
// are computed on the host from shapes (device.ShapeFactory).
var ops = map[string]opDef{
	"Add":                                 {numeric, simple(binaryOp("add", numeric))},
	"Sub":                                 {numeric, simple(binaryOp("sub", numeric))},
	"Mul":                                 {numeric, simple(binaryOp("mul", numeric))},
	"Div":                                 {numeric, simple(binaryOp("div", numeric))},
	"SquaredDifference":                   {numeric, simple(binaryOp("squared_difference", numeric))},
	"Maximum":                             {numeric, simple(binaryOp("maximum", numeric))},
	"Minimum":                             {numeric, simple(binaryOp("minimum", numeric))},
	"Less":                                {boolOut, simple(binaryOp("less", numeric))},
	"LessEqual":                           {boolOut, simple(binaryOp("less_equal", numeric))},
	"Greater":                             {boolOut, simple(binaryOp("greater", numeric))},
	"GreaterEqual":                        {boolOut, simple(binaryOp("greater_equal", numeric))},
	"Equal":                               {boolOut, simple(binaryOp("equal", equalTypes))},
	"Neg":                                 {numeric, simple(unary("neg", numeric))},
	"Abs":                                 {numeric, simple(unary("abs", numeric))},
	"Sign":                                {numeric, simple(unary("sign", numeric))},
	"Softplus":                            {f32, simple(unary("softplus", f32))},
	"Square":                              {numeric, simple(unary("square", numeric))},
	"Exp":                                 {f32, simple(unary("exp", f32))},
	"Log":                                 {f32, simple(unary("log", f32))},
	"Rsqrt":                               {f32, simple(unary("rsqrt", f32))},
	"Tanh":                                {f32, simple(unary("tanh", f32))},
	"TanhGrad":                            {f32, simple(gradOp("tanh_grad", f32))},
	"Softmax":                             {f32, simple(softmax(false))},
	"LogSoftmax":                          {f32, simple(softmax(true))},
	"SoftmaxCrossEntropyWithLogits":       {f32, simple(softmaxXent)},
	"AddN":                                {numeric, simple(addN)},
	"SelectV2":                            {nil, simple(selectV2)},
	"Relu":                                {numeric, simple(unary("relu", numeric))},
	"Sigmoid":                             {f32, simple(unary("sigmoid", f32))},
	"ReluGrad":                            {numeric, simple(gradOp("relu_grad", numeric))},
	"SigmoidGrad":                         {f32, simple(gradOp("sigmoid_grad", f32))},
	"BiasAdd":                             {numeric, simple(biasAdd)},
	"BiasAddGrad":                         {numeric, simple(biasAddGrad)},
	"Sum":                                 {numeric, reduction(false)},
	"Mean":                                {numeric, reduction(true)},
	"SumToShape":                          {numeric, simple(sumToShape)},
	"ArgMax":                              {indexOut, argMax},
	"Cast":                                {castTypes, simple(cast)},
	"Fill":                                {nil, simple(fill)},
	"ZerosLike":                           {nil, simple(zerosLike)},
	"OnesLike":                            {onesTypes(), simple(onesLike)},
	"Identity":                            {nil, simple(copyInput)},
	"Reshape":                             {nil, simple(copyInput)},
	"ExpandDims":                          {nil, simple(copyInput)},
	"Squeeze":                             {nil, simple(copyInput)},
	"StopGradient":                        {nil, simple(copyInput)},
	"Split":                               {nil, split},
	"BroadcastTo":                         {nil, simple(broadcastTo)},
	"Concat":                              {nil, concat},
	"Slice":                               {nil, slice},
	"Pad":                                 {nil, pad},
	"MatMul":                              {f32, matMul},
	"Conv2D":                              {f32, conv("Conv2D")},
	"Conv2DBackpropInput":                 {f32, conv("Conv2DBackpropInput")},
	"Conv2DBackpropFilter":                {f32, conv("Conv2DBackpropFilter")},
	"MaxPool":                             {f32, pool("MaxPool")},
	"MaxPoolGrad":                         {f32, pool("MaxPoolGrad")},
	"AvgPool":                             {f32, pool("AvgPool")},
	"AvgPoolGrad":                         {f32, pool("AvgPoolGrad")},
	"SparseSoftmaxCrossEntropyWithLogits": {f32, simple(sparseXent)},
	"Gather":                              {nil, gather},
}

// updates are the kernels of device.Updates: the kernel's name, the
// number of ref inputs (the variable, then its slots), and the index of
// the gradient, the one value input of the variable's shape (the others
// are scalars).
var updates = map[string]struct {
	kernel        string
	refs, gradIdx int
}{
	"ApplyGradientDescent": {"apply_gradient_descent_f32", 1, 2},
	"ApplyMomentum":        {"apply_momentum_f32", 2, 3},
	"ApplyAdagrad":         {"apply_adagrad_f32", 2, 3},
	"ApplyRMSProp":         {"apply_rms_prop_f32", 3, 7},
	"ApplyAdam":            {"apply_adam_f32", 3, 9},
}

// sparseUpdates are the kernels of device.SparseUpdates: the kernel's
// name (suffixed by the indices' type) and the number of ref inputs (the
// variable, then its slots).
var sparseUpdates = map[string]struct {
	kernel string
	refs   int
}{
	"SparseApplyGradientDescent": {"sparse_apply_gradient_descent_f32", 1},
	"SparseApplyMomentum":        {"sparse_apply_momentum_f32", 2},
	"SparseApplyAdagrad":         {"sparse_apply_adagrad_f32", 2},
	"SparseApplyAdam":            {"sparse_apply_adam_f32", 3},
}

// registerKernels registers a kernel for each op of device.Ops,
// device.Random, device.Updates, device.SparseUpdates and
// device.VariableOps, no more, so that soft placement sends the same ops to
// the CPU as on the simulator.
func registerKernels() {
	for _, name := range device.Random {
		device.RegisterKernel(Name, name, device.KernelDef{DTypes: f32, HostInputs: device.HostInputs(name), Factory: newRandom})
	}
	for _, name := range device.Updates {
		u, ok := updates[name]
		if !ok {
			panic(fmt.Sprintf("cuda: no kernel for %s of device.Updates", name))
		}
		device.RegisterKernel(Name, name, device.KernelDef{DTypes: f32,
			Factory: factory(name, opDef{f32, updateOp(u.kernel, u.refs, u.gradIdx)})})
	}
	for _, name := range device.SparseUpdates {
		u, ok := sparseUpdates[name]
		if !ok {
			panic(fmt.Sprintf("cuda: no kernel for %s of device.SparseUpdates", name))
		}
		device.RegisterKernel(Name, name, device.KernelDef{DTypes: f32,
			Factory: factory(name, opDef{f32, sparseUpdateOp(u.kernel, u.refs)})})
	}
	device.RegisterKernel(Name, "Assign", device.KernelDef{Factory: factory("Assign", opDef{nil, simple(assignCopy)})})
	for _, name := range []string{"AssignAdd", "AssignSub"} {
		device.RegisterKernel(Name, name, device.KernelDef{DTypes: device.AssignDTypes,
			Factory: factory(name, opDef{device.AssignDTypes, simple(assignAdd(name == "AssignSub"))})})
	}
	for _, name := range device.Ops {
		def := device.KernelDef{HostInputs: device.HostInputs(name), HostOutputs: device.HostOutputs(name)}
		if len(def.HostOutputs) > 0 {
			def.Factory = device.ShapeFactory(name)
			def.DTypes = indexOut
			device.RegisterKernel(Name, name, def)
			continue
		}
		o, ok := ops[name]
		if !ok {
			panic(fmt.Sprintf("cuda: no kernel for %s of device.Ops", name))
		}
		def.DTypes, def.InputDTypes = o.dtypes, inputTypes[name]
		def.Factory = factory(name, o)
		device.RegisterKernel(Name, name, def)
	}
}

func factory(name string, o opDef) func(n *graph.Node) (device.Kernel, error) {
	return func(n *graph.Node) (device.Kernel, error) {
		f, err := o.factory(n)
		if err != nil {
			return nil, fmt.Errorf("cuda: node %s (%s): %w", n, name, err)
		}
		host := device.HostInputs(name)
		return device.KernelFunc(func(c *device.Context) error {
			l, err := launcherOf(c)
			if err != nil {
				return err
			}
			c, err = deviceInputs(c, l, host)
			if err != nil {
				return err
			}
			return f(c, l)
		}), nil
	}
}

// deviceInputs copies to scratch device memory the inputs the kernel reads
// on the device but that arrive as host values (a Shape's result feeding
// an Add), so that every kernel sees its device inputs at an address. The
// copy is staged by the driver before CopyIn returns, and the scratch
// memory is reused only by work queued after this launch. The runtime's
// context is left as it was: the kernel gets a copy.
func deviceInputs(c *device.Context, l launcher, host []int) (*device.Context, error) {
	copied := false
	for i, in := range c.Inputs {
		if in.Host == nil || in.Buf.Ptr != 0 || slices.Contains(host, i) {
			continue
		}
		if c.Scratch == nil {
			return nil, fmt.Errorf("input %d is a host value and the launch has no scratch memory", i)
		}
		p, err := c.Scratch(in.Bytes())
		if err != nil {
			return nil, err
		}
		if err := l.Stream().CopyIn(p, in.Host.RawBytes()); err != nil {
			return nil, err
		}
		if !copied {
			cc := *c
			cc.Inputs = slices.Clone(c.Inputs)
			c, copied = &cc, true
		}
		t := *in
		t.Buf, t.Host = device.Buffer{Ptr: p, Size: in.Bytes()}, nil
		c.Inputs[i] = &t
	}
	return c, nil
}

// suffix is the kernel-name suffix of dt.
func suffix(dt tensor.DType) string {
	switch dt {
	case tensor.Float32:
		return "f32"
	case tensor.Int32:
		return "i32"
	case tensor.Int64:
		return "i64"
	case tensor.Bool:
		return "bool"
	}
	return dt.String()
}

func unsupported(what string, dt tensor.DType, types []tensor.DType) error {
	return fmt.Errorf("%w: %s of dtype %v (the CUDA kernel takes %v)", device.ErrNoKernel, what, dt, types)
}

func n64(t *device.Tensor) int64 { return int64(t.NumElements()) }

func checkOut(out *device.Tensor, shape []int) error {
	if !slices.Equal(out.Shape, shape) {
		return fmt.Errorf("output has shape %v, the kernel computes %v", out.Shape, shape)
	}
	return nil
}

// binaryOp is a broadcasting binary op: kernel name_<dtype>.
func binaryOp(name string, types []tensor.DType) launchFunc {
	return func(c *device.Context, l launcher) error {
		a, b, out := c.Inputs[0], c.Inputs[1], c.Outputs[0]
		if a.DType != b.DType {
			return fmt.Errorf("operands of dtypes %v and %v", a.DType, b.DType)
		}
		if !slices.Contains(types, a.DType) {
			return unsupported("operand", a.DType, types)
		}
		p, err := newBcastPlan(a.Shape, b.Shape)
		if err != nil {
			return err
		}
		if err := checkOut(out, p.out); err != nil {
			return err
		}
		n := n64(out)
		if n == 0 {
			return nil
		}
		return l.launch(name+"_"+suffix(a.DType), grid1(n), block1, a.Buf.Ptr, b.Buf.Ptr, out.Buf.Ptr, n, p.words())
	}
}

func unary(name string, types []tensor.DType) launchFunc {
	return func(c *device.Context, l launcher) error {
		x, y := c.Inputs[0], c.Outputs[0]
		if !slices.Contains(types, x.DType) {
			return unsupported("input", x.DType, types)
		}
		n := n64(y)
		if n == 0 {
			return nil
		}
		return l.launch(name+"_"+suffix(x.DType), grid1(n), block1, x.Buf.Ptr, y.Buf.Ptr, n)
	}
}

// gradOp is an activation gradient of two same-shaped inputs, passed to the
// kernel in the op's order.
func gradOp(name string, types []tensor.DType) launchFunc {
	return func(c *device.Context, l launcher) error {
		a, b, out := c.Inputs[0], c.Inputs[1], c.Outputs[0]
		if a.DType != b.DType || !slices.Equal(a.Shape, b.Shape) {
			return fmt.Errorf("inputs %v%v and %v%v must have one dtype and shape", a.DType, a.Shape, b.DType, b.Shape)
		}
		if !slices.Contains(types, a.DType) {
			return unsupported("input", a.DType, types)
		}
		n := n64(out)
		if n == 0 {
			return nil
		}
		return l.launch(name+"_"+suffix(a.DType), grid1(n), block1, a.Buf.Ptr, b.Buf.Ptr, out.Buf.Ptr, n)
	}
}

func biasAdd(c *device.Context, l launcher) error {
	x, b, y := c.Inputs[0], c.Inputs[1], c.Outputs[0]
	if x.DType != b.DType || !slices.Contains(numeric, x.DType) {
		return unsupported("value and bias", x.DType, numeric)
	}
	if len(x.Shape) < 1 || len(b.Shape) != 1 || x.Shape[len(x.Shape)-1] != b.Shape[0] {
		return fmt.Errorf("bias %v does not match the last dimension of value %v", b.Shape, x.Shape)
	}
	n := n64(y)
	if n == 0 {
		return nil
	}
	return l.launch("bias_add_"+suffix(x.DType), grid1(n), block1, x.Buf.Ptr, b.Buf.Ptr, y.Buf.Ptr, n, int64(b.Shape[0]))
}

// shortReduction is the longest reduction summed by one thread per output
// element rather than a block.
const shortReduction = 64

// reduce sums x over axes into out, scaled to a mean if mean.
func reduce(l launcher, x, out *device.Tensor, axes []int, mean bool) error {
	if !slices.Contains(numeric, x.DType) {
		return unsupported("input", x.DType, numeric)
	}
	p, err := newReducePlan(x.Shape, axes)
	if err != nil {
		return err
	}
	if p.nout != n64(out) {
		return fmt.Errorf("output %v has %d elements, reducing %v over %v gives %d", out.Shape, n64(out), x.Shape, axes, p.nout)
	}
	if p.nout == 0 {
		return nil
	}
	m := int32(0)
	if mean {
		m = 1
	}
	scale := 1 / float64(p.count) // +Inf for an empty mean: 0 * Inf is the CPU's NaN
	if p.count <= shortReduction {
		return l.launch("reduce_sum_short_"+suffix(x.DType), grid1(p.nout), block1,
			x.Buf.Ptr, out.Buf.Ptr, p.nout, p.count, p.words(), scale, m)
	}
	return l.launch("reduce_sum_"+suffix(x.DType), gridRows(p.nout), block1,
		x.Buf.Ptr, out.Buf.Ptr, p.nout, p.count, p.words(), scale, m)
}

func biasAddGrad(c *device.Context, l launcher) error {
	dy := c.Inputs[0]
	if len(dy.Shape) < 1 {
		return fmt.Errorf("out_backprop must have rank >= 1, got shape %v", dy.Shape)
	}
	axes := make([]int, len(dy.Shape)-1)
	for i := range axes {
		axes[i] = i
	}
	return reduce(l, dy, c.Outputs[0], axes, false)
}

func reduction(mean bool) func(n *graph.Node) (launchFunc, error) {
	return func(n *graph.Node) (launchFunc, error) {
		attr := n.AttrInts("axis")
		return func(c *device.Context, l launcher) error {
			x := c.Inputs[0]
			axes, err := op.MathNormalizeAxes(attr, len(x.Shape))
			if err != nil {
				return fmt.Errorf("%w (input shape %v)", err, x.Shape)
			}
			return reduce(l, x, c.Outputs[0], axes, mean)
		}, nil
	}
}

func sumToShape(c *device.Context, l launcher) error {
	x, out := c.Inputs[0], c.Outputs[0]
	if slices.Equal(x.Shape, out.Shape) {
		return copyInput(c, l)
	}
	axes, err := tensor.SumToAxes(x.Shape, out.Shape)
	if err != nil {
		return err
	}
	return reduce(l, x, out, axes, false)
}

func argMax(n *graph.Node) (launchFunc, error) {
	axis := n.AttrInt("axis")
	return func(c *device.Context, l launcher) error {
		x, out := c.Inputs[0], c.Outputs[0]
		if !slices.Contains(numeric, x.DType) {
			return unsupported("input", x.DType, numeric)
		}
		if out.DType != tensor.Int32 && out.DType != tensor.Int64 {
			return unsupported("output", out.DType, indexOut)
		}
		if len(x.Shape) == 0 {
			return fmt.Errorf("input must have rank >= 1, got shape []")
		}
		axes, err := op.MathNormalizeAxes([]int{axis}, len(x.Shape))
		if err != nil {
			return fmt.Errorf("%w (input shape %v)", err, x.Shape)
		}
		ax := axes[0]
		A, R, B := int64(tensor.NumElements(x.Shape[:ax])), int64(x.Shape[ax]), int64(tensor.NumElements(x.Shape[ax+1:]))
		n := n64(out)
		if n == 0 {
			return nil
		}
		if R == 0 {
			return fmt.Errorf("cannot take the maximum of an empty axis %d (input shape %v)", ax, x.Shape)
		}
		return l.launch("argmax_"+suffix(x.DType)+"_"+suffix(out.DType), grid1(n), block1, x.Buf.Ptr, out.Buf.Ptr, A, R, B)
	}, nil
}

func cast(c *device.Context, l launcher) error {
	x, y := c.Inputs[0], c.Outputs[0]
	if x.DType == y.DType {
		return copyInput(c, l)
	}
	if !slices.Contains(castTypes, x.DType) {
		return unsupported("input", x.DType, castTypes)
	}
	if !slices.Contains(castTypes, y.DType) {
		return unsupported("output", y.DType, castTypes)
	}
	n := n64(y)
	if n == 0 {
		return nil
	}
	return l.launch("cast_"+suffix(x.DType)+"_"+suffix(y.DType), grid1(n), block1, x.Buf.Ptr, y.Buf.Ptr, n)
}

// fillBits fills out with the element whose bytes are raw.
func fillBits(l launcher, out *device.Tensor, raw []byte) error {
	n := n64(out)
	if n == 0 {
		return nil
	}
	var bits uint64
	switch len(raw) {
	case 1:
		bits = uint64(raw[0])
	case 2:
		bits = uint64(binary.LittleEndian.Uint16(raw))
	case 4:
		bits = uint64(binary.LittleEndian.Uint32(raw))
	case 8:
		bits = binary.LittleEndian.Uint64(raw)
	default:
		return fmt.Errorf("cannot fill elements of %d bytes", len(raw))
	}
	return l.launch(fmt.Sprintf("fill_b%d", len(raw)), grid1(n), block1, out.Buf.Ptr, n, int64(bits))
}

func fill(c *device.Context, l launcher) error {
	v, out := c.Inputs[1], c.Outputs[0]
	if v.Host == nil || v.Host.NumElements() != 1 {
		return fmt.Errorf("value must be a host scalar, got %v%v", v.DType, v.Shape)
	}
	if v.DType != out.DType {
		return fmt.Errorf("value of dtype %v fills an output of %v", v.DType, out.DType)
	}
	return fillBits(l, out, v.Host.RawBytes())
}

func zerosLike(c *device.Context, l launcher) error {
	out := c.Outputs[0]
	return l.Stream().Zero(out.Buf.Ptr, out.Bytes())
}

// ones are the bytes of one in each dtype OnesLike fills (true for bool).
var ones = map[tensor.DType][]byte{
	tensor.Float32:  {0x00, 0x00, 0x80, 0x3f},
	tensor.Float64:  {0, 0, 0, 0, 0, 0, 0xf0, 0x3f},
	tensor.Int32:    {1, 0, 0, 0},
	tensor.Int64:    {1, 0, 0, 0, 0, 0, 0, 0},
	tensor.Uint8:    {1},
	tensor.Bool:     {1},
	tensor.Float16:  {0x00, 0x3c},
	tensor.BFloat16: {0x80, 0x3f},
}

func onesTypes() []tensor.DType {
	var ts []tensor.DType
	for dt := range ones {
		ts = append(ts, dt)
	}
	slices.Sort(ts)
	return ts
}

func onesLike(c *device.Context, l launcher) error {
	out := c.Outputs[0]
	raw, ok := ones[out.DType]
	if !ok {
		return unsupported("output", out.DType, onesTypes())
	}
	return fillBits(l, out, raw)
}

// copyInput copies input 0 into output 0 (Identity, Reshape, ExpandDims,
// Squeeze, StopGradient: the runtime allocates every output, so a view is
// not an option).
func copyInput(c *device.Context, l launcher) error {
	x, y := c.Inputs[0], c.Outputs[0]
	if x.Bytes() != y.Bytes() {
		return fmt.Errorf("input %v%v and output %v%v differ in size", x.DType, x.Shape, y.DType, y.Shape)
	}
	if x.Host != nil {
		return l.Stream().CopyIn(y.Buf.Ptr, x.Host.RawBytes())
	}
	return l.Stream().Copy(y.Buf.Ptr, x.Buf.Ptr, y.Bytes())
}

func broadcastTo(c *device.Context, l launcher) error {
	x, out := c.Inputs[0], c.Outputs[0]
	if slices.Equal(x.Shape, out.Shape) {
		return copyInput(c, l)
	}
	p, err := newBcastPlan(x.Shape, out.Shape)
	if err != nil || !slices.Equal(p.out, out.Shape) {
		return fmt.Errorf("cannot broadcast %v to %v", x.Shape, out.Shape)
	}
	n := n64(out)
	if n == 0 {
		return nil
	}
	return l.launch(fmt.Sprintf("bcast_b%d", x.DType.Size()), grid1(n), block1, x.Buf.Ptr, out.Buf.Ptr, n, p.words())
}

// elemSize is the size of dt's elements, for the kernels that move
// elements by size (select_b*, copy_box_b*).
func elemSize(dt tensor.DType) (int64, error) {
	switch size := dt.Size(); size {
	case 1, 2, 4, 8:
		return int64(size), nil
	default:
		return 0, fmt.Errorf("%w: %v (elements of %d bytes)", device.ErrNoKernel, dt, size)
	}
}

// selectV2 is SelectV2: select_b<element size> over the broadcast of
// cond, t and e.
func selectV2(c *device.Context, l launcher) error {
	cond, t, e, out := c.Inputs[0], c.Inputs[1], c.Inputs[2], c.Outputs[0]
	if cond.DType != tensor.Bool {
		return unsupported("cond", cond.DType, boolOut)
	}
	if t.DType != e.DType {
		return fmt.Errorf("t and e of dtypes %v and %v", t.DType, e.DType)
	}
	size, err := elemSize(t.DType)
	if err != nil {
		return err
	}
	p, err := newBcast3Plan(cond.Shape, t.Shape, e.Shape)
	if err != nil {
		return err
	}
	if err := checkOut(out, p.out); err != nil {
		return err
	}
	n := n64(out)
	if n == 0 {
		return nil
	}
	return l.launch(fmt.Sprintf("select_b%d", size), grid1(n), block1, cond.Buf.Ptr, t.Buf.Ptr, e.Buf.Ptr, out.Buf.Ptr, n, p.words())
}

// addNMax is the most inputs one launch of add_n sums (ADDN of
// kernels/elementwise.cu).
const addNMax = 8

// addN is AddN: add_n_<dtype> over the inputs addNMax at a time, each
// launch after the first adding onto the output, so that the sum runs in
// the inputs' order as the CPU's does.
func addN(c *device.Context, l launcher) error {
	if len(c.Inputs) == 0 {
		return fmt.Errorf("no inputs")
	}
	x0, out := c.Inputs[0], c.Outputs[0]
	for i, x := range c.Inputs {
		if x.DType != x0.DType || !slices.Equal(x.Shape, x0.Shape) {
			return fmt.Errorf("input %d is %v%v, input 0 is %v%v", i, x.DType, x.Shape, x0.DType, x0.Shape)
		}
	}
	if !slices.Contains(numeric, x0.DType) {
		return unsupported("inputs", x0.DType, numeric)
	}
	if err := checkOut(out, x0.Shape); err != nil {
		return err
	}
	n := n64(out)
	if n == 0 {
		return nil
	}
	if len(c.Inputs) == 1 {
		return copyInput(c, l)
	}
	for i := 0; i < len(c.Inputs); i += addNMax {
		batch := c.Inputs[i:min(i+addNMax, len(c.Inputs))]
		ptrs := make(words, addNMax)
		for j, x := range batch {
			ptrs[j] = int64(x.Buf.Ptr)
		}
		acc := int32(0)
		if i > 0 {
			acc = 1
		}
		if err := l.launch("add_n_"+suffix(x0.DType), grid1(n), block1, ptrs, int64(len(batch)), out.Buf.Ptr, n, acc); err != nil {
			return err
		}
	}
	return nil
}

// copyBox copies the box p plans (newBoxPlan) from src to dst, elements of
// size bytes: one device-to-device copy where both layouts hold it
// contiguously, else copy_box_b<size>.
func copyBox(l launcher, src, dst device.Ptr, p *bcastPlan, size int64) error {
	n := int64(1)
	for _, d := range p.dims {
		n *= d
	}
	if n == 0 {
		return nil
	}
	if p.contiguous() {
		return l.Stream().Copy(dst, src, n*size)
	}
	return l.launch(fmt.Sprintf("copy_box_b%d", size), grid1(n), block1, src, dst, n, p.words())
}

// concat is Concat: each input copied into its place in the output, seen
// as [outer, the inputs' extents on the axis summed, inner].
func concat(n *graph.Node) (launchFunc, error) {
	attr := n.AttrInt("axis")
	return func(c *device.Context, l launcher) error {
		if len(c.Inputs) == 0 {
			return fmt.Errorf("no inputs")
		}
		first, out := c.Inputs[0], c.Outputs[0]
		axis, err := op.ArrayNormAxis(attr, tensor.MakeShape(first.Shape...))
		if err != nil {
			return err
		}
		dims := slices.Clone(first.Shape)
		dims[axis] = 0
		for i, x := range c.Inputs {
			if x.DType != first.DType || len(x.Shape) != len(first.Shape) {
				return fmt.Errorf("input %d is %v%v, input 0 is %v%v", i, x.DType, x.Shape, first.DType, first.Shape)
			}
			for j, d := range x.Shape {
				if j != axis && d != dims[j] {
					return fmt.Errorf("input %d has shape %v, input 0 has shape %v (concatenating on axis %d)", i, x.Shape, first.Shape, axis)
				}
			}
			dims[axis] += x.Shape[axis]
		}
		if err := checkOut(out, dims); err != nil {
			return err
		}
		size, err := elemSize(out.DType)
		if err != nil {
			return err
		}
		if n64(out) == 0 {
			return nil
		}
		outer, inner := tensor.NumElements(dims[:axis]), int64(tensor.NumElements(dims[axis+1:]))
		row := int64(dims[axis]) * inner // an outer index's elements in the output
		var at int64                     // the input's first element in the output
		for _, x := range c.Inputs {
			w := int64(x.Shape[axis]) * inner
			p, err := newBoxPlan([]int{outer, int(w)}, []int64{w, 1}, []int64{row, 1})
			if err != nil {
				return err
			}
			if err := copyBox(l, x.Buf.Ptr, out.Buf.Ptr.Add(at*size), p, size); err != nil {
				return err
			}
			at += w
		}
		return nil
	}, nil
}

// slice is Slice: the box at begin of extent size (-1: to the end of the
// axis) copied out of the input.
func slice(n *graph.Node) (launchFunc, error) {
	begin, size := n.AttrInts("begin"), n.AttrInts("size")
	return func(c *device.Context, l launcher) error {
		x, out := c.Inputs[0], c.Outputs[0]
		if len(begin) != len(x.Shape) || len(size) != len(x.Shape) {
			return fmt.Errorf("begin %v and size %v must have one entry per dimension of shape %v", begin, size, x.Shape)
		}
		box, str := slices.Clone(size), rowMajor(x.Shape)
		var at int64 // the box's first element in the input
		for i, d := range x.Shape {
			if box[i] == -1 {
				box[i] = d - begin[i]
			}
			if begin[i] < 0 || box[i] < 0 || begin[i]+box[i] > d {
				return fmt.Errorf("slice begin %v size %v is out of bounds of shape %v", begin, size, x.Shape)
			}
			at += int64(begin[i]) * str[i]
		}
		if err := checkOut(out, box); err != nil {
			return err
		}
		es, err := elemSize(x.DType)
		if err != nil {
			return err
		}
		if n64(out) == 0 {
			return nil
		}
		p, err := newBoxPlan(box, str, rowMajor(box))
		if err != nil {
			return err
		}
		return copyBox(l, x.Buf.Ptr.Add(at*es), out.Buf.Ptr, p, es)
	}, nil
}

// pad is Pad (Slice's gradient): the output zeroed, then the input copied
// into its interior.
func pad(n *graph.Node) (launchFunc, error) {
	paddings := n.AttrInts("paddings")
	return func(c *device.Context, l launcher) error {
		x, out := c.Inputs[0], c.Outputs[0]
		if len(paddings) != 2*len(x.Shape) {
			return fmt.Errorf("paddings %v must hold 2 values per dimension of shape %v", paddings, x.Shape)
		}
		dims := make([]int, len(x.Shape))
		for i, d := range x.Shape {
			if paddings[2*i] < 0 || paddings[2*i+1] < 0 {
				return fmt.Errorf("paddings %v has a negative entry", paddings)
			}
			dims[i] = d + paddings[2*i] + paddings[2*i+1]
		}
		if err := checkOut(out, dims); err != nil {
			return err
		}
		es, err := elemSize(x.DType)
		if err != nil {
			return err
		}
		if n64(out) == 0 {
			return nil
		}
		if err := l.Stream().Zero(out.Buf.Ptr, out.Bytes()); err != nil {
			return err
		}
		str := rowMajor(dims)
		var at int64 // the input's first element in the output
		for i := range dims {
			at += int64(paddings[2*i]) * str[i]
		}
		p, err := newBoxPlan(x.Shape, rowMajor(x.Shape), str)
		if err != nil {
			return err
		}
		return copyBox(l, x.Buf.Ptr, out.Buf.Ptr.Add(at*es), p, es)
	}, nil
}

// gemmTile is TILE of kernels/gemm.cu.
const gemmTile = 16

func matMul(n *graph.Node) (launchFunc, error) {
	ta, tb := n.AttrBool("transpose_a"), n.AttrBool("transpose_b")
	return func(c *device.Context, l launcher) error {
		a, b, out := c.Inputs[0], c.Inputs[1], c.Outputs[0]
		if a.DType != tensor.Float32 || b.DType != tensor.Float32 {
			return unsupported("operands", a.DType, f32)
		}
		r := len(a.Shape)
		if r < 2 || len(b.Shape) != r {
			return fmt.Errorf("operands must be matrices (or batches of one rank): %v x %v", a.Shape, b.Shape)
		}
		if !slices.Equal(a.Shape[:r-2], b.Shape[:r-2]) {
			return fmt.Errorf("batch dimensions differ: %v x %v", a.Shape, b.Shape)
		}
		m, k := a.Shape[r-2], a.Shape[r-1]
		if ta {
			m, k = k, m
		}
		kb, nn := b.Shape[r-2], b.Shape[r-1]
		if tb {
			kb, nn = nn, kb
		}
		if k != kb {
			return fmt.Errorf("inner dimensions differ: %v x %v (transpose_a=%v, transpose_b=%v)", a.Shape, b.Shape, ta, tb)
		}
		batch := tensor.NumElements(a.Shape[:r-2])
		if err := checkOut(out, append(slices.Clone(a.Shape[:r-2]), m, nn)); err != nil {
			return err
		}
		if n64(out) == 0 {
			return nil
		}
		if k == 0 {
			return l.Stream().Zero(out.Buf.Ptr, out.Bytes())
		}
		const maxInt32 = 1<<31 - 1
		if m > maxInt32 || nn > maxInt32 || k > maxInt32 || batch > 65535 {
			return fmt.Errorf("a product of %d x %d by %d x %d, %d times, is too large for one GEMM", m, k, k, nn, batch)
		}
		return runGemm(l, gemm{transA: ta, transB: tb, m: m, n: nn, k: k, a: uint64(a.Buf.Ptr), b: uint64(b.Buf.Ptr), c: uint64(out.Buf.Ptr),
			batch: batch, strideA: int64(m) * int64(k), strideB: int64(k) * int64(nn), strideC: int64(m) * int64(nn)})
	}, nil
}

// maxGemmRows is the most rows of C one launch of gemm_f32 computes: its
// grid's y dimension is limited to 65535 tiles.
const maxGemmRows = 65535 * gemmTile

// runGemm enqueues g on cuBLAS, or on the package's gemm_f32 kernel where
// cuBLAS is not loaded, splitting a product of too many rows for one grid
// into launches of maxGemmRows rows (of a row-major op(A) = A only).
func runGemm(l launcher, g gemm) error {
	const maxInt32 = 1<<31 - 1
	if g.m > maxInt32 || g.n > maxInt32 || g.k > maxInt32 {
		return fmt.Errorf("a product of %d x %d by %d x %d is too large for one GEMM", g.m, g.k, g.k, g.n)
	}
	if done, err := l.sgemm(g); done || err != nil {
		return err
	}
	if g.m > maxGemmRows && (g.transA || g.batch > 1) {
		return fmt.Errorf("a product of %d rows is too large for the GEMM kernel", g.m)
	}
	ti, tj, acc := int32(0), int32(0), int32(0)
	if g.transA {
		ti = 1
	}
	if g.transB {
		tj = 1
	}
	if g.accumulate {
		acc = 1
	}
	for r0 := 0; r0 < g.m; r0 += maxGemmRows {
		rows := min(g.m-r0, maxGemmRows)
		grid := [3]uint32{uint32((g.n + gemmTile - 1) / gemmTile), uint32((rows + gemmTile - 1) / gemmTile), uint32(max(g.batch, 1))}
		a, c := device.Ptr(g.a).Add(4*int64(r0)*int64(g.k)), device.Ptr(g.c).Add(4*int64(r0)*int64(g.n))
		if err := l.launch("gemm_f32", grid, [3]uint32{gemmTile, gemmTile, 1}, a, device.Ptr(g.b), c,
			int64(rows), int64(g.n), int64(g.k), ti, tj, g.strideA, g.strideB, g.strideC, acc); err != nil {
			return err
		}
	}
	return nil
}

// window reads the strides (and, for pooling, ksize) and padding
// attributes, as the CPU kernels do.
type window struct {
	kh, kw, sh, sw int
	padding        string
}

func readWindow(n *graph.Node, pool bool) (window, error) {
	var w window
	s := n.AttrInts("strides")
	if len(s) != 2 || s[0] < 1 || s[1] < 1 {
		return w, fmt.Errorf("attribute strides must be two positive integers, got %v", s)
	}
	w.sh, w.sw = s[0], s[1]
	if pool {
		k := n.AttrInts("ksize")
		if len(k) != 2 || k[0] < 1 || k[1] < 1 {
			return w, fmt.Errorf("attribute ksize must be two positive integers, got %v", k)
		}
		w.kh, w.kw = k[0], k[1]
	}
	w.padding = n.AttrString("padding")
	if w.padding != op.PaddingSame && w.padding != op.PaddingValid {
		return w, fmt.Errorf("padding %q must be SAME or VALID", w.padding)
	}
	return w, nil
}

// geometry is struct Conv and struct Pool of kernels/nn.cu: n, h, w, c, kh,
// kw, [co,] sh, sw, pt, pl, oh, ow.
func geometry(in []int, kh, kw, co int, w window, withCo bool) (words, []int, error) {
	if len(in) != 4 {
		return nil, nil, fmt.Errorf("input %v must be [batch, height, width, channels]", in)
	}
	oh, pt, err := op.WindowedOutputSize(in[1], kh, w.sh, w.padding)
	if err != nil {
		return nil, nil, fmt.Errorf("input %v, window %dx%d: %w", in, kh, kw, err)
	}
	ow, pl, err := op.WindowedOutputSize(in[2], kw, w.sw, w.padding)
	if err != nil {
		return nil, nil, fmt.Errorf("input %v, window %dx%d: %w", in, kh, kw, err)
	}
	g := words{int64(in[0]), int64(in[1]), int64(in[2]), int64(in[3]), int64(kh), int64(kw)}
	outC := in[3]
	if withCo {
		g = append(g, int64(co))
		outC = co
	}
	g = append(g, int64(w.sh), int64(w.sw), int64(pt), int64(pl), int64(oh), int64(ow))
	return g, []int{in[0], oh, ow, outC}, nil
}

// convScratch bounds the im2col matrix of one chunk of images, in bytes: a
// convolution over a larger batch runs chunk by chunk through one scratch
// buffer, which the stream's order lets each chunk reuse. A variable only
// so that the tests can make chunks of a few images.
var convScratch int64 = 64 << 20

func conv(name string) func(n *graph.Node) (launchFunc, error) {
	return func(n *graph.Node) (launchFunc, error) {
		w, err := readWindow(n, false)
		if err != nil {
			return nil, err
		}
		return func(c *device.Context, l launcher) error {
			out := c.Outputs[0]
			var x, f, dy *device.Tensor
			var in, filter []int
			switch name {
			case "Conv2D":
				x, f = c.Inputs[0], c.Inputs[1]
				in, filter = x.Shape, f.Shape
			case "Conv2DBackpropInput": // input_sizes is the output's shape
				f, dy = c.Inputs[1], c.Inputs[2]
				in, filter = out.Shape, f.Shape
			default: // Conv2DBackpropFilter: filter_sizes is the output's shape
				x, dy = c.Inputs[0], c.Inputs[2]
				in, filter = x.Shape, out.Shape
			}
			for _, t := range []*device.Tensor{x, f, dy} {
				if t != nil && t.DType != tensor.Float32 {
					return unsupported("input", t.DType, f32)
				}
			}
			if len(filter) != 4 {
				return fmt.Errorf("filter %v must be [height, width, in_channels, out_channels]", filter)
			}
			if len(in) == 4 && in[3] != filter[2] {
				return fmt.Errorf("input %v and filter %v have different input channels", in, filter)
			}
			g, outShape, err := geometry(in, filter[0], filter[1], filter[3], w, true)
			if err != nil {
				return err
			}
			if name == "Conv2D" {
				err = checkOut(out, outShape)
			} else if !slices.Equal(dy.Shape, outShape) {
				err = fmt.Errorf("out_backprop %v does not match the forward output shape %v", dy.Shape, outShape)
			}
			if err != nil {
				return err
			}
			cv := convPlan{g: g, oh: outShape[1], ow: outShape[2]}
			if n64(out) == 0 {
				return nil
			}
			switch name {
			case "Conv2D":
				return cv.forward(c, l, x, f, out)
			case "Conv2DBackpropInput":
				return cv.backpropInput(c, l, dy, f, out)
			}
			return cv.backpropFilter(c, l, x, dy, out)
		}, nil
	}
}

// convPlan is a convolution as GEMMs (see kernels/nn.cu): g is struct Conv
// of the whole batch.
type convPlan struct {
	g      words
	oh, ow int
}

// The fields of struct Conv in g.
const (
	convN = iota
	convH
	convW
	convC
	convKH
	convKW
	convCO
	convSH
	convSW
	convPT
	convPL
)

// k is the length of an im2col row: kh * kw * c.
func (p convPlan) k() int { return int(p.g[convKH] * p.g[convKW] * p.g[convC]) }

// direct reports whether the input is its own im2col matrix: a 1x1 filter
// at stride 1 without padding, where the convolution is one product.
func (p convPlan) direct() bool {
	return p.g[convKH] == 1 && p.g[convKW] == 1 && p.g[convSH] == 1 && p.g[convSW] == 1 && p.g[convPT] == 0 && p.g[convPL] == 0
}

// chunks calls f for each chunk of images [n0, n0+nb), with the plan's
// struct Conv for the chunk and the scratch buffer for its im2col matrix
// (of nb*oh*ow rows of k()): as many images as convScratch holds, at least
// one, and no more rows than one GEMM launch takes.
func (p convPlan) chunks(c *device.Context, f func(n0, nb int, g words, cols device.Ptr) error) error {
	n, rows := int(p.g[convN]), p.oh*p.ow
	rowBytes := int64(rows) * int64(p.k()) * 4
	per := max(1, min(int(convScratch/max(rowBytes, 1)), maxGemmRows/max(rows, 1), n))
	if c.Scratch == nil {
		return fmt.Errorf("the launch has no scratch memory for the im2col matrix")
	}
	cols, err := c.Scratch(int64(per) * rowBytes)
	if err != nil {
		return err
	}
	for n0 := 0; n0 < n; n0 += per {
		nb := min(per, n-n0)
		g := slices.Clone(p.g)
		g[convN] = int64(nb)
		if err := f(n0, nb, g, cols); err != nil {
			return err
		}
	}
	return nil
}

// forward is Conv2D: y = im2col(x) f.
func (p convPlan) forward(c *device.Context, l launcher, x, f, y *device.Tensor) error {
	n, co := int(p.g[convN]), int(p.g[convCO])
	rows, K := p.oh*p.ow, p.k()
	if p.direct() {
		return runGemm(l, gemm{m: n * rows, n: co, k: K, a: uint64(x.Buf.Ptr), b: uint64(f.Buf.Ptr), c: uint64(y.Buf.Ptr), batch: 1})
	}
	inImage := 4 * p.g[convH] * p.g[convW] * p.g[convC]
	return p.chunks(c, func(n0, nb int, g words, cols device.Ptr) error {
		m := nb * rows
		if err := l.launch("im2col_f32", grid1(int64(m)*int64(K)), block1, x.Buf.Ptr.Add(int64(n0)*inImage), cols, g); err != nil {
			return err
		}
		return runGemm(l, gemm{m: m, n: co, k: K, a: uint64(cols), b: uint64(f.Buf.Ptr),
			c: uint64(y.Buf.Ptr.Add(4 * int64(n0) * int64(rows) * int64(co))), batch: 1})
	})
}

// backpropInput is Conv2DBackpropInput: dx = col2im(dy f^T).
func (p convPlan) backpropInput(c *device.Context, l launcher, dy, f, dx *device.Tensor) error {
	n, co := int(p.g[convN]), int(p.g[convCO])
	rows, K := p.oh*p.ow, p.k()
	if p.direct() {
		return runGemm(l, gemm{transB: true, m: n * rows, n: K, k: co, a: uint64(dy.Buf.Ptr), b: uint64(f.Buf.Ptr), c: uint64(dx.Buf.Ptr), batch: 1})
	}
	inImage := 4 * p.g[convH] * p.g[convW] * p.g[convC]
	return p.chunks(c, func(n0, nb int, g words, cols device.Ptr) error {
		m := nb * rows
		if err := runGemm(l, gemm{transB: true, m: m, n: K, k: co, a: uint64(dy.Buf.Ptr.Add(4 * int64(n0) * int64(rows) * int64(co))),
			b: uint64(f.Buf.Ptr), c: uint64(cols), batch: 1}); err != nil {
			return err
		}
		return l.launch("col2im_f32", grid1(int64(nb)*inImage/4), block1, cols, dx.Buf.Ptr.Add(int64(n0)*inImage), g)
	})
}

// backpropFilter is Conv2DBackpropFilter: df = im2col(x)^T dy, summed over
// the chunks.
func (p convPlan) backpropFilter(c *device.Context, l launcher, x, dy, df *device.Tensor) error {
	n, co := int(p.g[convN]), int(p.g[convCO])
	rows, K := p.oh*p.ow, p.k()
	if n*rows == 0 {
		return l.Stream().Zero(df.Buf.Ptr, df.Bytes())
	}
	if p.direct() {
		return runGemm(l, gemm{transA: true, m: K, n: co, k: n * rows, a: uint64(x.Buf.Ptr), b: uint64(dy.Buf.Ptr), c: uint64(df.Buf.Ptr), batch: 1})
	}
	inImage := 4 * p.g[convH] * p.g[convW] * p.g[convC]
	return p.chunks(c, func(n0, nb int, g words, cols device.Ptr) error {
		m := nb * rows
		if err := l.launch("im2col_f32", grid1(int64(m)*int64(K)), block1, x.Buf.Ptr.Add(int64(n0)*inImage), cols, g); err != nil {
			return err
		}
		return runGemm(l, gemm{transA: true, m: K, n: co, k: m, a: uint64(cols),
			b: uint64(dy.Buf.Ptr.Add(4 * int64(n0) * int64(rows) * int64(co))), c: uint64(df.Buf.Ptr), batch: 1, accumulate: n0 > 0})
	})
}

// updateOp is an optimizer's update of a variable and its refs-1 slots,
// inputs 0 to refs-1, in place: the kernel takes every input's address in
// the op's order, then the element count (and ApplyMomentum its
// use_nesterov). The gradient is input gradIdx; the other inputs are
// scalars.
func updateOp(kernel string, refs, gradIdx int) func(n *graph.Node) (launchFunc, error) {
	return func(n *graph.Node) (launchFunc, error) {
		var extra []any
		if n.Op() == "ApplyMomentum" {
			nesterov := int32(0)
			if n.AttrBool("use_nesterov") {
				nesterov = 1
			}
			extra = append(extra, nesterov)
		}
		return func(c *device.Context, l launcher) error {
			v := c.Inputs[0]
			args := make([]any, 0, len(c.Inputs)+1+len(extra))
			for i, in := range c.Inputs {
				if in.DType != tensor.Float32 {
					return unsupported(fmt.Sprintf("input %d", i), in.DType, f32)
				}
				switch {
				case i < refs || i == gradIdx:
					if !slices.Equal(in.Shape, v.Shape) {
						return fmt.Errorf("input %d has shape %v, the variable %v", i, in.Shape, v.Shape)
					}
				case in.NumElements() != 1:
					return fmt.Errorf("input %d must be a scalar, got shape %v", i, in.Shape)
				}
				// The variable and its slots are written: one buffer
				// passed twice would be updated twice.
				for j := range min(i, refs) {
					if i < refs && c.Inputs[j].Buf.Ptr == in.Buf.Ptr {
						return fmt.Errorf("inputs %d and %d are the same variable", j, i)
					}
				}
				args = append(args, in.Buf.Ptr)
			}
			n := n64(v)
			if n == 0 {
				return nil
			}
			rec, _, err := l.faultLog().record(l.Stream(), nil)
			if err != nil {
				return err
			}
			args = append(append(append(args, n), extra...), rec)
			return l.launch(kernel, grid1(n), block1, args...)
		}, nil
	}
}

func pool(name string) func(n *graph.Node) (launchFunc, error) {
	return func(n *graph.Node) (launchFunc, error) {
		w, err := readWindow(n, true)
		if err != nil {
			return nil, err
		}
		return func(c *device.Context, l launcher) error {
			out := c.Outputs[0]
			for i, t := range c.Inputs {
				if i == 0 && name == "AvgPoolGrad" { // orig_input_shape, on the host
					continue
				}
				if t.DType != tensor.Float32 {
					return unsupported("input", t.DType, f32)
				}
			}
			in := c.Inputs[0].Shape
			if name == "AvgPoolGrad" {
				if in, err = hostShape(c.Inputs[0], "orig_input_shape"); err != nil {
					return err
				}
			}
			g, pooled, err := geometry(in, w.kh, w.kw, 0, w, false)
			if err != nil {
				return err
			}
			switch name {
			case "MaxPool", "AvgPool":
				if err := checkOut(out, pooled); err != nil {
					return err
				}
				kernel := "max_pool_f32"
				if name == "AvgPool" {
					kernel = "avg_pool_f32"
				}
				if n := n64(out); n > 0 {
					return l.launch(kernel, grid1(n), block1, c.Inputs[0].Buf.Ptr, out.Buf.Ptr, g)
				}
				return nil
			case "AvgPoolGrad":
				dy := c.Inputs[1]
				if !slices.Equal(dy.Shape, pooled) {
					return fmt.Errorf("grad %v must have the pooled shape %v of orig_input_shape %v", dy.Shape, pooled, in)
				}
				if err := checkOut(out, in); err != nil {
					return err
				}
				if n := n64(out); n > 0 {
					return l.launch("avg_pool_grad_f32", grid1(n), block1, dy.Buf.Ptr, out.Buf.Ptr, g)
				}
				return nil
			}
			x, y, dy := c.Inputs[0], c.Inputs[1], c.Inputs[2]
			if !slices.Equal(y.Shape, pooled) || !slices.Equal(dy.Shape, pooled) {
				return fmt.Errorf("orig_output %v and grad %v must have the pooled shape %v of orig_input %v", y.Shape, dy.Shape, pooled, x.Shape)
			}
			if err := checkOut(out, x.Shape); err != nil {
				return err
			}
			if n := n64(out); n > 0 {
				return l.launch("max_pool_grad_f32", grid1(n), block1, x.Buf.Ptr, dy.Buf.Ptr, out.Buf.Ptr, g)
			}
			return nil
		}, nil
	}
}

// hostShape reads a shape argument given on the host as an int32 or
// int64 vector (AvgPoolGrad's orig_input_shape).
func hostShape(t *device.Tensor, what string) ([]int, error) {
	if t.Host == nil || len(t.Shape) != 1 {
		return nil, fmt.Errorf("%s must be a vector on the host, got %v%v", what, t.DType, t.Shape)
	}
	dims := make([]int, t.Shape[0])
	for i := range dims {
		switch t.DType {
		case tensor.Int32:
			dims[i] = int(t.Host.Int32s()[i])
		case tensor.Int64:
			dims[i] = int(t.Host.Int64s()[i])
		default:
			return nil, unsupported(what, t.DType, indexOut)
		}
		if dims[i] < 0 {
			return nil, fmt.Errorf("%s %v has a negative dimension", what, t.Host)
		}
	}
	return dims, nil
}

// softmax is Softmax (LogSoftmax with log) over the last axis:
// softmax_f32, a block per row.
func softmax(log bool) launchFunc {
	return func(c *device.Context, l launcher) error {
		x, y := c.Inputs[0], c.Outputs[0]
		if x.DType != tensor.Float32 {
			return unsupported("logits", x.DType, f32)
		}
		if len(x.Shape) < 1 {
			return fmt.Errorf("logits must have rank >= 1, got shape %v", x.Shape)
		}
		if err := checkOut(y, x.Shape); err != nil {
			return err
		}
		cols := int64(x.Shape[len(x.Shape)-1])
		if n64(x) == 0 {
			return nil
		}
		lg := int32(0)
		if log {
			lg = 1
		}
		rows := n64(x) / cols
		return l.launch("softmax_f32", gridRows(rows), block1, x.Buf.Ptr, y.Buf.Ptr, rows, cols, lg)
	}
}

// softmaxXent is SoftmaxCrossEntropyWithLogits: softmax_xent_f32, a block
// per row of logits and labels [batch, classes].
func softmaxXent(c *device.Context, l launcher) error {
	logits, labels := c.Inputs[0], c.Inputs[1]
	loss, bp := c.Outputs[0], c.Outputs[1]
	if logits.DType != tensor.Float32 || labels.DType != tensor.Float32 {
		return unsupported("logits and labels", logits.DType, f32)
	}
	if len(logits.Shape) != 2 || !slices.Equal(logits.Shape, labels.Shape) {
		return fmt.Errorf("logits %v and labels %v must be [batch, classes] of one shape", logits.Shape, labels.Shape)
	}
	rows, cols := int64(logits.Shape[0]), int64(logits.Shape[1])
	if rows == 0 {
		return nil
	}
	if cols == 0 {
		return l.Stream().Zero(loss.Buf.Ptr, loss.Bytes())
	}
	return l.launch("softmax_xent_f32", gridRows(rows), block1,
		logits.Buf.Ptr, labels.Buf.Ptr, loss.Buf.Ptr, bp.Buf.Ptr, rows, cols)
}

// split is Split: each of num_split equal parts along the axis copied out
// of the input, seen as [outer, the axis's extent, inner].
func split(n *graph.Node) (launchFunc, error) {
	attr, num := n.AttrInt("axis"), n.AttrInt("num_split")
	return func(c *device.Context, l launcher) error {
		x := c.Inputs[0]
		axis, err := op.ArrayNormAxis(attr, tensor.MakeShape(x.Shape...))
		if err != nil {
			return err
		}
		if num < 1 || x.Shape[axis]%num != 0 || len(c.Outputs) != num {
			return fmt.Errorf("dimension %d of shape %v is not divisible by num_split %d", axis, x.Shape, num)
		}
		dims := slices.Clone(x.Shape)
		dims[axis] /= num
		size, err := elemSize(x.DType)
		if err != nil {
			return err
		}
		for _, out := range c.Outputs {
			if err := checkOut(out, dims); err != nil {
				return err
			}
		}
		outer, inner := tensor.NumElements(dims[:axis]), int64(tensor.NumElements(dims[axis+1:]))
		w := int64(dims[axis]) * inner // a part's elements per outer index
		if int64(outer)*w == 0 {
			return nil
		}
		p, err := newBoxPlan([]int{outer, int(w)}, []int64{int64(num) * w, 1}, []int64{w, 1})
		if err != nil {
			return err
		}
		for i, out := range c.Outputs {
			if err := copyBox(l, x.Buf.Ptr.Add(int64(i)*w*size), out.Buf.Ptr, p, size); err != nil {
				return err
			}
		}
		return nil
	}, nil
}

func sparseXent(c *device.Context, l launcher) error {
	logits, labels := c.Inputs[0], c.Inputs[1]
	loss, bp := c.Outputs[0], c.Outputs[1]
	if logits.DType != tensor.Float32 {
		return unsupported("logits", logits.DType, f32)
	}
	if labels.DType != tensor.Int32 && labels.DType != tensor.Int64 {
		return unsupported("labels", labels.DType, indexOut)
	}
	if len(logits.Shape) != 2 || len(labels.Shape) != 1 || labels.Shape[0] != logits.Shape[0] {
		return fmt.Errorf("logits %v must be [batch, classes] and labels %v [batch]", logits.Shape, labels.Shape)
	}
	rows, cols := int64(logits.Shape[0]), int64(logits.Shape[1])
	if rows == 0 {
		return nil
	}
	if cols == 0 {
		return l.Stream().Zero(loss.Buf.Ptr, loss.Bytes())
	}
	return l.launch("sparse_xent_f32_"+suffix(labels.DType), gridRows(rows), block1,
		logits.Buf.Ptr, labels.Buf.Ptr, loss.Buf.Ptr, bp.Buf.Ptr, rows, cols)
}

// assignAdd is AssignAdd (AssignSub with sub): the value added to the
// variable in place, and the new value in the output.
func assignAdd(sub bool) launchFunc {
	return func(c *device.Context, l launcher) error {
		ref, val, out := c.Inputs[0], c.Inputs[1], c.Outputs[0]
		if ref.DType != val.DType || !slices.Equal(ref.Shape, val.Shape) {
			return fmt.Errorf("cannot add %v%v to a variable of %v%v", val.DType, val.Shape, ref.DType, ref.Shape)
		}
		if !slices.Contains(device.AssignDTypes, ref.DType) {
			return unsupported("variable", ref.DType, device.AssignDTypes)
		}
		if err := checkOut(out, ref.Shape); err != nil {
			return err
		}
		n := n64(ref)
		if n == 0 {
			return nil
		}
		s := int32(0)
		if sub {
			s = 1
		}
		rec, _, err := l.faultLog().record(l.Stream(), nil)
		if err != nil {
			return err
		}
		return l.launch("assign_add_"+suffix(ref.DType), grid1(n), block1, ref.Buf.Ptr, val.Buf.Ptr, out.Buf.Ptr, n, s, rec)
	}
}

// assignCopy is Assign: the value copied into the variable and the output
// by a kernel rather than device.AssignFactory's copies, so that it
// writes nothing while the fault record holds a fault, as the updates.
func assignCopy(c *device.Context, l launcher) error {
	ref, val, out := c.Inputs[0], c.Inputs[1], c.Outputs[0]
	if err := device.CheckAssign(ref, val); err != nil {
		return err
	}
	n := ref.Bytes()
	if n == 0 {
		return nil
	}
	rec, _, err := l.faultLog().record(l.Stream(), nil)
	if err != nil {
		return err
	}
	return l.launch("assign_copy", grid1((n+3)/4), block1, ref.Buf.Ptr, val.Buf.Ptr, out.Buf.Ptr, n, rec)
}

// sparseUpdateOp is a sparse update (device.SparseUpdates) of a variable
// with rows and its refs-1 slots, in place, in two launches (see
// kernels/optim.cu): sparse_rows_<index type> checks the indices on the
// device, reporting one out of range to the device's fault record, and
// links the positions of each index in scratch memory; the rule's kernel
// then sums each index's gradient rows and updates its row, unless an
// index was out of range. The rule's kernel takes every input's address
// in the op's order, then the links, the number of indices and the row's
// width (and SparseApplyMomentum its use_nesterov).
func sparseUpdateOp(kernel string, refs int) func(n *graph.Node) (launchFunc, error) {
	return func(n *graph.Node) (launchFunc, error) {
		gradIdx, idxIdx := -1, device.SparseIndices(n.Op())
		if d, ok := op.Lookup(n.Op()); ok {
			for i, in := range d.Inputs {
				if in.Name == "grad" {
					gradIdx = i
				}
			}
		}
		if gradIdx < 0 || idxIdx < 0 {
			return nil, fmt.Errorf("%s has no grad or indices input", n.Op())
		}
		var extra []any
		if n.Op() == "SparseApplyMomentum" {
			nesterov := int32(0)
			if n.AttrBool("use_nesterov") {
				nesterov = 1
			}
			extra = append(extra, nesterov)
		}
		return func(c *device.Context, l launcher) error {
			v, g, idx := c.Inputs[0], c.Inputs[gradIdx], c.Inputs[idxIdx]
			if len(v.Shape) < 1 {
				return fmt.Errorf("the variable must have rows, got shape %v", v.Shape)
			}
			if idx.DType != tensor.Int32 && idx.DType != tensor.Int64 {
				return unsupported("indices", idx.DType, indexOut)
			}
			rows, width, count := int64(v.Shape[0]), int64(tensor.NumElements(v.Shape[1:])), n64(idx)
			if len(g.Shape) < 1 || int64(g.Shape[0]) != count || n64(g) != count*width {
				return fmt.Errorf("gradient %v does not match %d indices into a variable of %v", g.Shape, count, v.Shape)
			}
			if count > 1<<31-1 {
				return fmt.Errorf("%d indices: the kernel links at most 2^31-1", count)
			}
			args := make([]any, 0, len(c.Inputs)+6+len(extra))
			for i, in := range c.Inputs {
				switch {
				case i == idxIdx:
				case in.DType != tensor.Float32:
					return unsupported(fmt.Sprintf("input %d", i), in.DType, f32)
				case i < refs:
					if !slices.Equal(in.Shape, v.Shape) {
						return fmt.Errorf("input %d has shape %v, the variable %v", i, in.Shape, v.Shape)
					}
					for j := range i {
						if c.Inputs[j].Buf.Ptr == in.Buf.Ptr {
							return fmt.Errorf("inputs %d and %d are the same variable", j, i)
						}
					}
				case i != gradIdx && in.NumElements() != 1:
					return fmt.Errorf("input %d must be a scalar, got shape %v", i, in.Shape)
				}
				args = append(args, in.Buf.Ptr)
			}
			if count == 0 {
				return nil
			}
			if c.Scratch == nil {
				return fmt.Errorf("the launch has no scratch memory for the indices' links")
			}
			links, err := c.Scratch(4 * (2*count + 1))
			if err != nil {
				return err
			}
			next, lead, bad := links, links.Add(4*count), links.Add(8*count)
			rec, tag, err := l.faultLog().record(l.Stream(), c.Node)
			if err != nil {
				return err
			}
			if err := l.Stream().Zero(bad, 4); err != nil {
				return err
			}
			sfx := suffix(idx.DType)
			if err := sparseLinks(c, l, idx, sfx, count, rows, next, lead, bad, rec, tag); err != nil {
				return err
			}
			if width == 0 {
				return nil
			}
			args = append(append(append(args, next, lead, bad, count, width), extra...), rec)
			return l.launch(kernel+"_"+sfx, grid1(count*width), block1, args...)
		}, nil
	}
}

// gather is Gather: gather_b<element size>_<index type> (kernels/
// elementwise.cu), which checks each index on the device, reporting one
// out of range to the device's fault record and giving 0 for its slice.
func gather(n *graph.Node) (launchFunc, error) {
	attr := n.AttrInt("axis")
	return func(c *device.Context, l launcher) error {
		params, idx, out := c.Inputs[0], c.Inputs[1], c.Outputs[0]
		if idx.DType != tensor.Int32 && idx.DType != tensor.Int64 {
			return unsupported("indices", idx.DType, indexOut)
		}
		axis, err := op.ArrayNormAxis(attr, tensor.MakeShape(params.Shape...))
		if err != nil {
			return err
		}
		p := params.Shape
		if err := checkOut(out, slices.Concat(p[:axis], idx.Shape, p[axis+1:])); err != nil {
			return err
		}
		size := params.DType.Size()
		if size != 1 && size != 2 && size != 4 && size != 8 {
			return fmt.Errorf("%w: Gather of %v (elements of %d bytes)", device.ErrNoKernel, params.DType, size)
		}
		total, count := n64(out), n64(idx)
		if total == 0 {
			return nil
		}
		inner, dim := int64(tensor.NumElements(p[axis+1:])), int64(p[axis])
		rec, tag, err := l.faultLog().record(l.Stream(), c.Node)
		if err != nil {
			return err
		}
		return l.launch(fmt.Sprintf("gather_b%d_%s", size, suffix(idx.DType)), grid1(total), block1,
			params.Buf.Ptr, idx.Buf.Ptr, out.Buf.Ptr, total, count, inner, dim, rec, tag)
	}, nil
}

// sparseSortFrom is the number of indices from which a sparse update links
// their positions by sorting them (O(n log^2 n), in log^2 n launches)
// rather than by each position scanning the others (O(n^2), one launch).
// A variable only so that the tests can sort a few indices.
var sparseSortFrom int64 = 4096

// sparseLinks checks the count indices of idx (index type sfx) against
// rows and links the positions of each index into next and lead (see
// kernels/optim.cu).
func sparseLinks(c *device.Context, l launcher, idx *device.Tensor, sfx string, count, rows int64, next, lead, bad device.Ptr, rec device.Ptr, tag int32) error {
	if count < sparseSortFrom || rows > 1<<32 {
		return l.launch("sparse_rows_"+sfx, grid1(count), block1, idx.Buf.Ptr, count, rows, next, lead, bad, rec, tag)
	}
	total := int64(1)
	for total < count {
		total *= 2
	}
	keys, err := c.Scratch(8 * total)
	if err != nil {
		return err
	}
	if err := l.launch("sparse_keys_"+sfx, grid1(total), block1, idx.Buf.Ptr, count, rows, keys, total, bad, rec, tag); err != nil {
		return err
	}
	for k := int64(2); k <= total; k *= 2 {
		for j := k / 2; j > 0; j /= 2 {
			if err := l.launch("bitonic_step", grid1(total), block1, keys, total, j, k); err != nil {
				return err
			}
		}
	}
	return l.launch("sparse_links", grid1(count), block1, keys, count, next, lead)
}
