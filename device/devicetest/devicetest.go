// Package devicetest is the conformance suite of device platforms: every
// platform (the simulator, CUDA) runs Run, which checks its memory,
// streams, allocator and out-of-memory errors, logical devices, each
// kernel of device.Ops against the CPU kernel on the same inputs, the
// ops that update variables in place (device.Updates, device.SparseUpdates,
// AssignAdd and AssignSub) against the CPU's, indices out of range (a
// fault at the next Synchronize, nothing written), and variables kept in
// device memory (device.Variables, as package device/runner runs them)
// updated in place by those ops.
//
//	func TestConformance(t *testing.T) { devicetest.Run(t, sim.New(sim.Config{})) }
package devicetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	_ "github.com/distflow/distflow/kernel/cpu" // the reference kernels
	opdef "github.com/distflow/distflow/op"
	"github.com/distflow/distflow/tensor"
)

// Tolerances of the kernels against the CPU's: relative, with an absolute
// floor for values near zero. Reductions and products may sum in another
// order on a device.
const (
	forwardTol  = 1e-5
	gradientTol = 1e-4
)

// Run runs the whole suite on p, which must have at least one device.
func Run(t *testing.T, p device.Platform) {
	t.Run("Memory", func(t *testing.T) { testMemory(t, p) })
	t.Run("Coalesce", func(t *testing.T) { testCoalesce(t, p) })
	t.Run("OutOfMemory", func(t *testing.T) { testOutOfMemory(t, p) })
	t.Run("Stream", func(t *testing.T) { testStream(t, p) })
	t.Run("Logical", func(t *testing.T) { testLogical(t, p) })
	t.Run("Capture", func(t *testing.T) { testCapture(t, p) })
	t.Run("Kernels", func(t *testing.T) { testKernels(t, p) })
	t.Run("Updates", func(t *testing.T) { testUpdates(t, p) })
	t.Run("Random", func(t *testing.T) { testRandom(t, p) })
	t.Run("Variables", func(t *testing.T) { testVariables(t, p) })
}

// open opens one device of p with opts, closed at the test's end.
func open(t *testing.T, p device.Platform, opts device.Options) []device.Device {
	t.Helper()
	devs, err := p.Open(opts)
	if err != nil {
		t.Fatalf("%s: Open(%+v): %v", p.Name(), opts, err)
	}
	t.Cleanup(func() {
		for _, d := range devs {
			if err := d.Close(); err != nil {
				t.Errorf("%s: Close: %v", d.Info().Name, err)
			}
		}
	})
	return devs
}

func sync(t *testing.T, d device.Device) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := d.Stream().Synchronize(ctx); err != nil {
		t.Fatalf("%s: Synchronize: %v", d.Info().Name, err)
	}
}

func testMemory(t *testing.T, p device.Platform) {
	d := open(t, p, device.Options{Count: 1, MemoryLimit: 64 << 20})[0]
	a := d.Allocator()
	info := d.Info()
	if info.Name != "GPU:0" || info.Platform != p.Name() || info.LimitBytes != 64<<20 || info.TotalBytes < info.LimitBytes {
		t.Errorf("Info() = %+v, want GPU:0 of %s with a 64 MiB limit", info, p.Name())
	}
	var bufs []device.Buffer
	for _, n := range []int64{0, 1, 255, 256, 257, 4096, 1 << 20, 3<<20 + 5} {
		b, err := a.Alloc(n)
		if err != nil {
			t.Fatalf("Alloc(%d): %v", n, err)
		}
		if b.Ptr == 0 || b.Ptr%device.Alignment != 0 || b.Size < n || b.Size%device.Alignment != 0 {
			t.Errorf("Alloc(%d) = %+v: want an aligned buffer of at least %d bytes", n, b, n)
		}
		for _, o := range bufs {
			if b.Ptr < o.Ptr.Add(o.Size) && o.Ptr < b.Ptr.Add(b.Size) {
				t.Errorf("Alloc(%d) = %+v overlaps %+v", n, b, o)
			}
		}
		bufs = append(bufs, b)
	}
	st := a.Stats()
	var sum int64
	for _, b := range bufs {
		sum += b.Size
	}
	if st.InUse != sum || st.Peak != sum || st.Live != int64(len(bufs)) {
		t.Errorf("Stats() = %+v, want %d bytes in use by %d allocations", st, sum, len(bufs))
	}
	// Every byte written comes back, through the device.
	data := make([]byte, bufs[len(bufs)-1].Size)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := d.Stream().CopyIn(bufs[len(bufs)-1].Ptr, data); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, len(data))
	if err := d.Stream().CopyOut(back, bufs[len(bufs)-1].Ptr); err != nil {
		t.Fatal(err)
	}
	sync(t, d)
	if !bytes.Equal(back, data) {
		t.Error("CopyIn then CopyOut did not give the bytes back")
	}
	for _, b := range bufs {
		if err := a.Free(b); err != nil {
			t.Errorf("Free(%+v): %v", b, err)
		}
	}
	if err := a.Free(bufs[0]); err == nil {
		t.Error("a second Free of a buffer succeeded")
	}
	st = a.Stats()
	if st.InUse != 0 || st.Live != 0 || st.Peak != sum {
		t.Errorf("after the frees Stats() = %+v, want nothing in use and a peak of %d", st, sum)
	}
}

func testCoalesce(t *testing.T, p device.Platform) {
	d := open(t, p, device.Options{Count: 1, MemoryLimit: 64 << 20})[0]
	a := d.Allocator()
	const n = 128 << 10
	var bufs []device.Buffer
	for range 3 {
		b, err := a.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, b)
	}
	reserved := a.Stats().Reserved
	a.Free(bufs[0])
	a.Free(bufs[1])
	// The two neighbours freed are one block again: twice their size
	// fits where the first was, without reserving more.
	b, err := a.Alloc(2 * n)
	if err != nil {
		t.Fatal(err)
	}
	if b.Ptr != bufs[0].Ptr || a.Stats().Reserved != reserved {
		t.Errorf("Alloc(%d) after freeing two neighbours of %d = %+v (reserved %d -> %d), want %#x without reserving: free blocks did not coalesce",
			2*n, n, b, reserved, a.Stats().Reserved, uint64(bufs[0].Ptr))
	}
	a.Free(b)
	a.Free(bufs[2])
}

func testOutOfMemory(t *testing.T, p device.Platform) {
	const limit = 8 << 20
	d := open(t, p, device.Options{Count: 1, MemoryLimit: limit})[0]
	a := d.Allocator()
	keep, err := a.Alloc(5 << 20)
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Alloc(4 << 20)
	if !errors.Is(err, device.ErrOutOfMemory) {
		t.Fatalf("Alloc past the limit: %v, want ErrOutOfMemory", err)
	}
	for _, want := range []string{"GPU:0", "4.0 MiB", "3.0 MiB free", "8.0 MiB limit"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("out-of-memory error %q does not say %q", err, want)
		}
	}
	// The failure leaves the allocator usable, and freeing makes room,
	// even for a block larger than any region reserved so far.
	a.Free(keep)
	b, err := a.Alloc(7 << 20)
	if err != nil {
		t.Fatalf("Alloc after a free: %v", err)
	}
	a.Free(b)
}

func testStream(t *testing.T, p device.Platform) {
	d := open(t, p, device.Options{Count: 1, MemoryLimit: 64 << 20})[0]
	a, s := d.Allocator(), d.Stream()
	const n = 1 << 16
	x, _ := a.Alloc(n)
	y, _ := a.Alloc(n)
	defer a.Free(x)
	defer a.Free(y)
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i)
	}
	// In order: copy in, copy across, zero the first, copy both out.
	out1, out2 := make([]byte, n), make([]byte, n)
	for _, err := range []error{s.CopyIn(x.Ptr, src), s.Copy(y.Ptr, x.Ptr, n), s.Zero(x.Ptr, n/2),
		s.CopyOut(out1, x.Ptr), s.CopyOut(out2, y.Ptr)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	sync(t, d)
	if !bytes.Equal(out2, src) {
		t.Error("Copy on the device lost bytes")
	}
	if !bytes.Equal(out1[:n/2], make([]byte, n/2)) || !bytes.Equal(out1[n/2:], src[n/2:]) {
		t.Error("Zero did not zero exactly its range, in stream order")
	}
	// A cancelled context ends the wait, not the stream.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Synchronize(ctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Synchronize(cancelled) = %v, want nil or context.Canceled", err)
	}
	sync(t, d)
}

func testCapture(t *testing.T, p device.Platform) {
	d := open(t, p, device.Options{Count: 1, MemoryLimit: 64 << 20})[0]
	c, ok := d.Stream().(device.Capturer)
	if !ok {
		t.Skipf("%s's stream does not capture graphs", p.Name())
	}
	a := d.Allocator()
	const n = 4096
	x, _ := a.Alloc(n)
	y, _ := a.Alloc(n)
	defer a.Free(x)
	defer a.Free(y)
	src := bytes.Repeat([]byte{7}, n)
	c.CopyIn(x.Ptr, src)
	c.Zero(y.Ptr, n)
	sync(t, d)
	if err := c.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	if err := c.Copy(y.Ptr, x.Ptr, n/2); err != nil {
		t.Fatalf("Copy while capturing: %v", err)
	}
	g, err := c.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	got := make([]byte, n)
	c.CopyOut(got, y.Ptr)
	sync(t, d)
	if !bytes.Equal(got, make([]byte, n)) {
		t.Fatal("captured work ran at capture time")
	}
	// Each launch replays it: change the source, launch, and the copy
	// reads the new bytes.
	for _, v := range []byte{7, 9} {
		c.CopyIn(x.Ptr, bytes.Repeat([]byte{v}, n))
		if err := g.Launch(); err != nil {
			t.Fatal(err)
		}
		c.CopyOut(got, y.Ptr)
		sync(t, d)
		if !bytes.Equal(got[:n/2], bytes.Repeat([]byte{v}, n/2)) || !bytes.Equal(got[n/2:], make([]byte, n/2)) {
			t.Fatalf("a replay after writing %d did not copy exactly the captured range", v)
		}
	}
	// A copy from host memory cannot be captured.
	if err := c.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	cerr := c.CopyIn(x.Ptr, src)
	_, eerr := c.EndCapture()
	if !errors.Is(cerr, device.ErrNotCapturable) && !errors.Is(eerr, device.ErrNotCapturable) {
		t.Errorf("a host copy while capturing: CopyIn %v, EndCapture %v; want ErrNotCapturable", cerr, eerr)
	}
	sync(t, d) // the stream is usable after a failed capture
}

func testLogical(t *testing.T, p device.Platform) {
	devs := open(t, p, device.Options{Count: 2, Logical: 2, MemoryFraction: 0.5})
	a, b := devs[0].Info(), devs[1].Info()
	if a.Name != "GPU:0" || b.Name != "GPU:1" || a.Physical != b.Physical {
		t.Errorf("two logical devices of one card: %+v and %+v", a, b)
	}
	want := device.Options{MemoryFraction: 0.5}.Limit(a.TotalBytes, 2)
	if a.LimitBytes != want || b.LimitBytes != want {
		t.Errorf("logical device limits %d and %d, want a quarter of the card each (%d)", a.LimitBytes, b.LimitBytes, want)
	}
	// Their memory spaces are apart: what one writes the other does not see.
	x, err := devs[0].Allocator().Alloc(1024)
	if err != nil {
		t.Fatal(err)
	}
	y, err := devs[1].Allocator().Alloc(1024)
	if err != nil {
		t.Fatal(err)
	}
	one := bytes.Repeat([]byte{1}, 1024)
	devs[0].Stream().CopyIn(x.Ptr, one)
	devs[1].Stream().Zero(y.Ptr, 1024)
	got := make([]byte, 1024)
	devs[1].Stream().CopyOut(got, y.Ptr)
	sync(t, devs[0])
	sync(t, devs[1])
	if !bytes.Equal(got, make([]byte, 1024)) {
		t.Error("a logical device saw another's write")
	}
	devs[0].Allocator().Free(x)
	devs[1].Allocator().Free(y)
	if a.Logical != 0 || b.Logical != 1 {
		t.Errorf("logical ordinals %d and %d; want 0 and 1", a.Logical, b.Logical)
	}
	// A process sharing the card opens its own share: the second, named
	// GPU:0 in that process.
	second := open(t, p, device.Options{Count: 1, Logical: 2, First: 1, MemoryFraction: 0.5})[0].Info()
	if second.Name != "GPU:0" || second.Logical != 1 || second.Physical != a.Physical || second.LimitBytes != want {
		t.Errorf("the second logical device of the card opened alone: %+v", second)
	}
	cards, err := p.Probe()
	if err != nil {
		t.Fatal(err)
	}
	if devs, err := p.Open(device.Options{Count: 2, Logical: 2, First: 2*cards - 1}); err == nil {
		for _, d := range devs {
			d.Close()
		}
		t.Errorf("2 devices from the last of %d logical devices opened", 2*cards)
	} else if !errors.Is(err, device.ErrUnavailable) {
		t.Errorf("2 devices from the last logical device: %v; want ErrUnavailable", err)
	}
}

// Case is one kernel check: an op with attributes on inputs, compared
// with the CPU kernel's outputs.
type Case struct {
	Op    string
	Attrs map[string]any
	// Inputs are the input values; those the op reads on the host
	// (device.HostInputs) are handed over as host tensors.
	Inputs []*tensor.Tensor
	// Gradient marks a backward op, checked at gradientTol.
	Gradient bool
	// Tol, when set, is the case's own tolerance: a long float sum, which
	// the CPU accumulates in float32 and a device in another order.
	Tol float64
	// Exact asks for the CPU's outputs bit for bit, but for NaNs' payloads:
	// the sign of each zero, infinities and NaNs where the CPU has them (an
	// exact op, such as Abs, Sign or Maximum, on edge values).
	Exact bool
}

func (c Case) String() string {
	var shapes []string
	for _, in := range c.Inputs {
		shapes = append(shapes, fmt.Sprintf("%v%v", in.DType(), in.Shape()))
	}
	return fmt.Sprintf("%s(%s)%v", c.Op, strings.Join(shapes, ","), c.Attrs)
}

// requireKernels fails t for each op of list (named listName) that p has
// no kernel for.
func requireKernels(t *testing.T, p device.Platform, list []string, listName string) {
	t.Helper()
	have := device.Kernels(p.Name())
	for _, op := range list {
		if !slices.Contains(have, op) {
			t.Errorf("platform %s has no kernel for %s (%s)", p.Name(), op, listName)
		}
	}
}

func testKernels(t *testing.T, p device.Platform) {
	requireKernels(t, p, device.Ops, "device.Ops")
	d := open(t, p, device.Options{Count: 1, MemoryLimit: 256 << 20})[0]
	covered := map[string]bool{}
	for _, c := range Cases() {
		covered[c.Op] = true
		t.Run(c.Op, func(t *testing.T) {
			msg, err := Check(d, c)
			if err != nil {
				t.Fatal(err)
			}
			if msg != "" {
				t.Error(msg)
			}
		})
	}
	for _, op := range device.Ops {
		if !covered[op] {
			t.Errorf("no case of %s in devicetest.Cases", op)
		}
	}
	t.Run("GatherIndexOutOfRange", func(t *testing.T) { testGatherIndexOutOfRange(t, d) })
	t.Run("NoWritesAfterAFault", func(t *testing.T) { testNoWritesAfterAFault(t, d) })
	t.Run("ValuesRefused", func(t *testing.T) { testValuesRefused(t, d) })
	if st := d.Allocator().Stats(); st.Live != 0 {
		t.Errorf("the kernel cases left %d allocations (%d bytes) live", st.Live, st.InUse)
	}
}

// Check runs c on d and on the CPU and returns "" when every output
// agrees within the case's tolerance, else what differs; err is a failure
// to run it at all.
func Check(d device.Device, c Case) (string, error) {
	want, err := cpu(c)
	if err != nil {
		return "", fmt.Errorf("%v on the CPU: %w", c, err)
	}
	got, err := onDevice(d, c)
	if err != nil {
		return "", fmt.Errorf("%v on %s: %w", c, d.Info().Name, err)
	}
	tol := forwardTol
	if c.Gradient {
		tol = gradientTol
	}
	if c.Tol > 0 {
		tol = c.Tol
	}
	var msgs []string
	for i := range want {
		cmp := compare
		if c.Exact {
			cmp = compareExact
		}
		if msg := cmp(got[i], want[i], tol); msg != "" {
			msgs = append(msgs, fmt.Sprintf("%v output %d: %s", c, i, msg))
		}
	}
	return strings.Join(msgs, "; "), nil
}

// Node builds c's node over Placeholders (Consts for host inputs, so that
// the build-time shape function sees their values as the run-time one
// does), in a graph of its own.
func Node(c Case) (*graph.Node, error) {
	s := graph.NewScope()
	var ins []graph.Output
	host := device.HostInputs(c.Op)
	for i, in := range c.Inputs {
		if slices.Contains(host, i) {
			ins = append(ins, s.Out("Const", fmt.Sprintf("c%d", i), nil, map[string]any{"value": in}))
			continue
		}
		if refInput(c.Op, i) {
			ins = append(ins, s.Out("Variable", fmt.Sprintf("v%d", i), nil,
				map[string]any{"dtype": in.DType(), "shape": tensor.MakeShape(in.Shape()...)}))
			continue
		}
		ins = append(ins, s.Out("Placeholder", fmt.Sprintf("x%d", i), nil,
			map[string]any{"dtype": in.DType(), "shape": tensor.MakeShape(in.Shape()...)}))
	}
	n := s.AddNode(c.Op, "node", ins, c.Attrs)
	return n, s.Err()
}

// refInput reports whether input i of op is a ref (a variable the op
// updates).
func refInput(op string, i int) bool {
	d, ok := opdef.Lookup(op)
	return ok && i < len(d.Inputs) && d.Inputs[i].Ref
}

func cpu(c Case) ([]*tensor.Tensor, error) {
	n, err := Node(c)
	if err != nil {
		return nil, err
	}
	f, err := kernel.Lookup(c.Op, kernel.CPU)
	if err != nil {
		return nil, err
	}
	k, err := f(n)
	if err != nil {
		return nil, err
	}
	kc := &kernel.Context{Ctx: context.Background(), Node: n, Inputs: c.Inputs, Outputs: make([]*tensor.Tensor, n.NumOutputs())}
	if err := k.Compute(kc); err != nil {
		return nil, err
	}
	return kc.Outputs, nil
}

// Prepared is a case's kernel with its inputs on a device, launched as
// often as wanted without copying them again: Launch enqueues the kernel
// once and frees its outputs (the stream orders their reuse), for timing;
// Run also brings the outputs back.
type Prepared struct {
	d    device.Device
	def  device.KernelDef
	k    device.Kernel
	node *graph.Node
	ins  []*device.Tensor
}

// Prepare builds c's kernel for d and copies its inputs in.
func Prepare(d device.Device, c Case) (*Prepared, error) {
	n, err := Node(c)
	if err != nil {
		return nil, err
	}
	def, err := device.LookupKernel(d.Info().Platform, c.Op)
	if err != nil {
		return nil, err
	}
	k, err := def.Factory(n)
	if err != nil {
		return nil, err
	}
	p := &Prepared{d: d, def: def, k: k, node: n, ins: make([]*device.Tensor, len(c.Inputs))}
	for i, in := range c.Inputs {
		if def.IsHostInput(i) {
			p.ins[i] = &device.Tensor{DType: in.DType(), Shape: in.Shape(), Host: in}
		} else if p.ins[i], err = device.Upload(d, in); err != nil {
			p.Close()
			return nil, err
		}
	}
	return p, nil
}

// Launch enqueues the kernel once.
func (p *Prepared) Launch() error {
	kc := &device.Context{Ctx: context.Background(), Node: p.node, Device: p.d, Stream: p.d.Stream(), Inputs: p.ins}
	if err := device.Launch(kc, p.def, p.k); err != nil {
		return err
	}
	device.FreeAll(p.d.Allocator(), kc.Outputs)
	return nil
}

// Run launches the kernel once and returns its outputs, on the host.
func (p *Prepared) Run() ([]*tensor.Tensor, error) {
	kc := &device.Context{Ctx: context.Background(), Node: p.node, Device: p.d, Stream: p.d.Stream(), Inputs: p.ins}
	if err := device.Launch(kc, p.def, p.k); err != nil {
		return nil, err
	}
	defer device.FreeAll(p.d.Allocator(), kc.Outputs)
	return download(p.d, kc.Outputs)
}

// download copies ts to the host and waits for the copies.
func download(d device.Device, ts []*device.Tensor) ([]*tensor.Tensor, error) {
	out := make([]*tensor.Tensor, len(ts))
	for i, t := range ts {
		var err error
		if out[i], err = device.Download(d, t); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := d.Stream().Synchronize(ctx); err != nil {
		return nil, err
	}
	return out, nil
}

// Close waits for the stream, frees the inputs, and releases what the
// kernel holds (device.Releaser).
func (p *Prepared) Close() error {
	err := p.d.Stream().Synchronize(context.Background())
	device.FreeAll(p.d.Allocator(), p.ins)
	if r, ok := p.k.(device.Releaser); ok {
		if rerr := r.Release(); err == nil {
			err = rerr
		}
	}
	return err
}

func onDevice(d device.Device, c Case) ([]*tensor.Tensor, error) {
	run, err := Prepare(d, c)
	if err != nil {
		return nil, err
	}
	out, err := run.Run()
	if cerr := run.Close(); err == nil {
		err = cerr
	}
	return out, err
}

// compare returns "" when got matches want within tol, else what differs.
func compare(got, want *tensor.Tensor, tol float64) string {
	if got.DType() != want.DType() || !slices.Equal(got.Shape(), want.Shape()) {
		return fmt.Sprintf("got %v%v, want %v%v", got.DType(), got.Shape(), want.DType(), want.Shape())
	}
	g, w := values(got), values(want)
	worst, at := 0.0, -1
	for i := range w {
		var rel float64
		switch {
		case math.IsNaN(g[i]) || math.IsNaN(w[i]):
			if math.IsNaN(g[i]) != math.IsNaN(w[i]) {
				rel = math.Inf(1)
			}
		case math.IsInf(g[i], 0) || math.IsInf(w[i], 0):
			if g[i] != w[i] {
				rel = math.Inf(1)
			}
		default:
			rel = math.Abs(g[i]-w[i]) / max(math.Abs(w[i]), 1)
		}
		if rel > worst {
			worst, at = rel, i
		}
	}
	if worst > tol {
		return fmt.Sprintf("element %d is %g, want %g (relative error %.3g > %g)", at, g[at], w[at], worst, tol)
	}
	return ""
}

// compareExact returns "" when got is want bit for bit (any NaN matching
// any NaN), else the first element that differs; tol is not used.
func compareExact(got, want *tensor.Tensor, _ float64) string {
	if got.DType() != want.DType() || !slices.Equal(got.Shape(), want.Shape()) {
		return fmt.Sprintf("got %v%v, want %v%v", got.DType(), got.Shape(), want.DType(), want.Shape())
	}
	g, w := values(got), values(want)
	float := want.DType().IsFloat()
	size := want.DType().Size()
	gb, wb := got.RawBytes(), want.RawBytes()
	for i := range w {
		if float && math.IsNaN(g[i]) && math.IsNaN(w[i]) {
			continue
		}
		if !bytes.Equal(gb[i*size:(i+1)*size], wb[i*size:(i+1)*size]) {
			return fmt.Sprintf("element %d is %g, want %g exactly", i, g[i], w[i])
		}
	}
	return ""
}

func values(t *tensor.Tensor) []float64 {
	out := make([]float64, t.NumElements())
	switch t.DType() {
	case tensor.Float32:
		for i, v := range t.Float32s() {
			out[i] = float64(v)
		}
	case tensor.Float64:
		copy(out, t.Float64s())
	case tensor.Int32:
		for i, v := range t.Int32s() {
			out[i] = float64(v)
		}
	case tensor.Int64:
		for i, v := range t.Int64s() {
			out[i] = float64(v)
		}
	case tensor.Bool:
		for i, v := range t.Bools() {
			if v {
				out[i] = 1
			}
		}
	}
	return out
}

// updateSteps is how many times testUpdates applies each update: the
// second step starts from the slots the first wrote.
const updateSteps = 2

// refCases are the cases of the ops that update variables in place:
// device.Updates, device.SparseUpdates, AssignAdd and AssignSub.
func refCases() []Case {
	return slices.Concat(UpdateCases(), SparseUpdateCases(), AssignCases())
}

// testUpdates checks the ops that update their ref inputs in place
// (device.Updates, device.SparseUpdates, and AssignAdd and AssignSub of
// device.VariableOps) against the CPU's kernels: the refs after two steps,
// and the outputs of the second; and that a sparse update given an index
// out of range reports it and writes nothing.
func testUpdates(t *testing.T, p device.Platform) {
	requireKernels(t, p, device.Updates, "device.Updates")
	requireKernels(t, p, device.SparseUpdates, "device.SparseUpdates")
	requireKernels(t, p, device.VariableOps, "device.VariableOps")
	d := open(t, p, device.Options{Count: 1, MemoryLimit: 64 << 20})[0]
	covered := map[string]bool{}
	for _, c := range refCases() {
		covered[c.Op] = true
		t.Run(c.Op, func(t *testing.T) {
			want, wantOuts, err := cpuUpdate(c, updateSteps)
			if err != nil {
				t.Fatalf("%v on the CPU: %v", c, err)
			}
			got, gotOuts, err := deviceUpdate(d, c, updateSteps)
			if err != nil {
				t.Fatalf("%v on %s: %v", c, d.Info().Name, err)
			}
			for i := range want {
				if msg := compare(got[i], want[i], forwardTol); msg != "" {
					t.Errorf("%v after %d steps, variable input %d: %s", c, updateSteps, i, msg)
				}
			}
			for i := range wantOuts {
				if msg := compare(gotOuts[i], wantOuts[i], forwardTol); msg != "" {
					t.Errorf("%v step %d, output %d: %s", c, updateSteps, i, msg)
				}
			}
		})
	}
	for _, op := range slices.Concat(device.Updates, device.SparseUpdates, device.VariableOps) {
		if !covered[op] && op != "Assign" { // Assign: testVariables
			t.Errorf("no case of %s in devicetest.UpdateCases, SparseUpdateCases or AssignCases", op)
		}
	}
	t.Run("IndexOutOfRange", func(t *testing.T) { testIndexOutOfRange(t, d) })
	if st := d.Allocator().Stats(); st.Live != 0 {
		t.Errorf("the update cases left %d allocations (%d bytes) live", st.Live, st.InUse)
	}
}

// cpuUpdate applies c's update steps times with the CPU kernel to
// variables holding c's ref inputs, and returns their values and the last
// step's outputs.
func cpuUpdate(c Case, steps int) (_, outs []*tensor.Tensor, _ error) {
	n, err := Node(c)
	if err != nil {
		return nil, nil, err
	}
	f, err := kernel.Lookup(c.Op, kernel.CPU)
	if err != nil {
		return nil, nil, err
	}
	k, err := f(n)
	if err != nil {
		return nil, nil, err
	}
	res := kernel.NewResources()
	kc := &kernel.Context{Ctx: context.Background(), Node: n, Resources: res,
		Inputs: make([]*tensor.Tensor, len(c.Inputs)), Refs: make([]*kernel.Variable, len(c.Inputs))}
	for i, in := range c.Inputs {
		if !n.IsRefInput(i) {
			kc.Inputs[i] = in
			continue
		}
		v, err := res.Variable(fmt.Sprintf("v%d", i), in.DType(), tensor.MakeShape(in.Shape()...))
		if err == nil {
			err = v.Assign(in)
		}
		if err != nil {
			return nil, nil, err
		}
		kc.Refs[i] = v
	}
	for range steps {
		kc.Outputs = make([]*tensor.Tensor, n.NumOutputs())
		if err := k.Compute(kc); err != nil {
			return nil, nil, err
		}
	}
	var out []*tensor.Tensor
	for _, v := range kc.Refs {
		if v == nil {
			continue
		}
		t, err := v.Read()
		if err != nil {
			return nil, nil, err
		}
		out = append(out, t)
	}
	return out, kc.Outputs, nil
}

// deviceUpdate applies c's update steps times on d to c's inputs copied
// into device memory, and returns the ref inputs' values and the last
// step's outputs.
func deviceUpdate(d device.Device, c Case, steps int) (_, outs []*tensor.Tensor, err error) {
	run, err := Prepare(d, c)
	if err != nil {
		return nil, nil, err
	}
	defer run.Close()
	for range steps - 1 {
		if err := run.Launch(); err != nil {
			return nil, nil, err
		}
	}
	if outs, err = run.Run(); err != nil {
		return nil, nil, err
	}
	var refs []*device.Tensor
	for i, in := range run.ins {
		if run.node.IsRefInput(i) {
			refs = append(refs, in)
		}
	}
	got, err := download(d, refs)
	return got, outs, err
}

// testGatherIndexOutOfRange gives Gather an index past the axis, then a
// negative one: the stream's next Synchronize returns an error wrapping
// device.ErrIndexOutOfRange that names the node, the index and its
// position, and the stream goes on: the next Gather runs as the CPU's.
func testGatherIndexOutOfRange(t *testing.T, d device.Device) {
	params := tensor.MustFromSlice([]float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}, 7, 2)
	for _, c := range []struct {
		idx  *tensor.Tensor
		want string
	}{
		{tensor.MustFromSlice([]int32{0, 7, 2}, 3), "indices[1] = 7 is out of range [0, 7)"},
		{tensor.MustFromSlice([]int64{6, 1, 1, -3}, 2, 2), "indices[3] = -3 is out of range [0, 7)"},
	} {
		bad := Case{Op: "Gather", Inputs: []*tensor.Tensor{params, c.idx}}
		run, err := Prepare(d, bad)
		if err != nil {
			t.Fatal(err)
		}
		_, err = run.Run()
		if !errors.Is(err, device.ErrIndexOutOfRange) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), run.node.Name()) {
			t.Errorf("%v: %v, want device.ErrIndexOutOfRange naming the node and %q", bad, err, c.want)
		}
		if err := run.Close(); err != nil {
			t.Errorf("%v: Close after the fault: %v", bad, err)
		}
		good := Case{Op: "Gather", Inputs: []*tensor.Tensor{params, tensor.MustFromSlice([]int32{6, 0, 6}, 3)}}
		if msg, err := Check(d, good); err != nil || msg != "" {
			t.Errorf("%v after the fault: %v %s", good, err, msg)
		}
	}
}

// testValuesRefused launches kernels on values the CPU kernels refuse (a
// label out of range, an integer division by zero). A platform may
// compute something (CUDA: NaN, 0) or fail the step at its Synchronize,
// naming the node; either way the device then serves the next kernel, as
// a CPU serves the next step after one with bad data.
func testValuesRefused(t *testing.T, d device.Device) {
	for _, c := range []struct{ bad, good Case }{
		{Case{Op: "Div", Inputs: []*tensor.Tensor{tensor.MustFromSlice([]int32{7, 8}, 2), tensor.MustFromSlice([]int32{0, 2}, 2)}},
			Case{Op: "Div", Inputs: []*tensor.Tensor{tensor.MustFromSlice([]int32{7, 8}, 2), tensor.MustFromSlice([]int32{3, 2}, 2)}}},
		{Case{Op: "SparseSoftmaxCrossEntropyWithLogits", Inputs: []*tensor.Tensor{tensor.MustFromSlice([]float32{1, 2, 3, 4}, 2, 2), tensor.MustFromSlice([]int32{1, 5}, 2)}},
			Case{Op: "SparseSoftmaxCrossEntropyWithLogits", Inputs: []*tensor.Tensor{tensor.MustFromSlice([]float32{1, 2, 3, 4}, 2, 2), tensor.MustFromSlice([]int32{1, 0}, 2)}}},
	} {
		run, err := Prepare(d, c.bad)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := run.Run(); err != nil && !strings.Contains(err.Error(), run.node.Name()) {
			t.Errorf("%v: %v, want an error naming the node %s (or values)", c.bad, err, run.node.Name())
		}
		if err := run.Close(); err != nil {
			t.Errorf("%v: Close after the step that failed: %v", c.bad, err)
		}
		if msg, err := Check(d, c.good); err != nil || msg != "" {
			t.Errorf("%v after %v: %v %s", c.good, c.bad, err, msg)
		}
	}
}

// testNoWritesAfterAFault queues a Gather with an index out of range and
// then an update, an AssignAdd and an Assign: until the stream's next
// Synchronize, which reports the fault, the kernels that write variables
// write nothing, so that a step failed on a device changes no variable
// after its fault (a failed step on the CPU changes none); after it, they
// run again as the CPU's.
func testNoWritesAfterAFault(t *testing.T, d device.Device) {
	params := tensor.MustFromSlice([]float32{1, 2, 3, 4, 5, 6}, 3, 2)
	bad, err := Prepare(d, Case{Op: "Gather", Inputs: []*tensor.Tensor{params, tensor.MustFromSlice([]int32{1, 3}, 2)}})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	x := tensor.MustFromSlice([]float32{1, -2, 3, -4, 5}, 5)
	writes := []Case{
		{Op: "ApplyGradientDescent", Inputs: []*tensor.Tensor{x, tensor.Scalar(float32(0.5)), x}},
		{Op: "AssignAdd", Inputs: []*tensor.Tensor{x, x}},
		{Op: "Assign", Inputs: []*tensor.Tensor{x, tensor.MustFromSlice([]float32{9, 9, 9, 9, 9}, 5)}},
		{Op: "AssignSub", Inputs: []*tensor.Tensor{tensor.Scalar(int64(7)), tensor.Scalar(int64(1))}},
	}
	var runs []*Prepared
	for _, c := range writes {
		run, err := Prepare(d, c)
		if err != nil {
			t.Fatal(err)
		}
		defer run.Close()
		runs = append(runs, run)
	}
	refs := func(run *Prepared) []*device.Tensor {
		var out []*device.Tensor
		for i, in := range run.ins {
			if run.node.IsRefInput(i) {
				out = append(out, in)
			}
		}
		return out
	}
	if err := bad.Launch(); err != nil {
		t.Fatal(err)
	}
	for _, run := range runs {
		if err := run.Launch(); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Stream().Synchronize(context.Background()); !errors.Is(err, device.ErrIndexOutOfRange) {
		t.Fatalf("Synchronize after a Gather out of range: %v, want device.ErrIndexOutOfRange", err)
	}
	for i, run := range runs {
		got, err := download(d, refs(run))
		if err != nil {
			t.Fatal(err)
		}
		if !equal(got[0], writes[i].Inputs[0]) {
			t.Errorf("%v queued after a fault wrote the variable: %v", writes[i], values(got[0]))
		}
	}
	// The fault reported, the writes run again.
	for i, run := range runs {
		if err := run.Launch(); err != nil {
			t.Fatal(err)
		}
		got, err := download(d, refs(run))
		if err != nil {
			t.Fatalf("%v after the fault: %v", writes[i], err)
		}
		want, _, err := cpuUpdate(writes[i], 1)
		if err != nil {
			t.Fatal(err)
		}
		if msg := compare(got[0], want[0], forwardTol); msg != "" {
			t.Errorf("%v after the fault: %s", writes[i], msg)
		}
	}
}

// testIndexOutOfRange gives each sparse update (device.SparseUpdates) an
// index past the variable's rows, then a negative one: the launch is
// queued, the stream's next Synchronize returns an error wrapping
// device.ErrIndexOutOfRange that names the node, the index and its
// position, the variable and its slots keep their values, and the stream
// goes on: the same update with the indices in range then runs as the
// CPU's.
func testIndexOutOfRange(t *testing.T, d device.Device) {
	covered := map[string]bool{}
	for _, c := range SparseUpdateCases() {
		if covered[c.Op] {
			continue
		}
		covered[c.Op] = true
		at := device.SparseIndices(c.Op)
		rows := c.Inputs[0].Shape()[0]
		for _, bad := range []int64{int64(rows), -1} {
			t.Run(fmt.Sprintf("%s/%d", c.Op, bad), func(t *testing.T) {
				bc := c
				bc.Inputs = slices.Clone(c.Inputs)
				idx := c.Inputs[at].Clone()
				const pos = 2
				if idx.DType() == tensor.Int32 {
					idx.Int32s()[pos] = int32(bad)
				} else {
					idx.Int64s()[pos] = bad
				}
				bc.Inputs[at] = idx
				run, err := Prepare(d, bc)
				if err != nil {
					t.Fatal(err)
				}
				defer run.Close()
				if err := run.Launch(); err != nil {
					t.Fatalf("the launch: %v, want the error at Synchronize", err)
				}
				err = d.Stream().Synchronize(context.Background())
				want := fmt.Sprintf("indices[%d] = %d is out of range [0, %d)", pos, bad, rows)
				if !errors.Is(err, device.ErrIndexOutOfRange) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), run.node.Name()) {
					t.Fatalf("%v: Synchronize: %v, want device.ErrIndexOutOfRange naming the node and %q", bc, err, want)
				}
				var refs []*device.Tensor
				for i, in := range run.ins {
					if run.node.IsRefInput(i) {
						refs = append(refs, in)
					}
				}
				got, err := download(d, refs)
				if err != nil {
					t.Fatalf("after the fault: %v", err)
				}
				for i, g := range got {
					if !equal(g, c.Inputs[i]) {
						t.Errorf("%v: variable input %d changed", bc, i)
					}
				}
				// The stream goes on; the next Synchronize reports nothing.
				wantVals, _, err := cpuUpdate(c, 1)
				if err != nil {
					t.Fatal(err)
				}
				got, _, err = deviceUpdate(d, c, 1)
				if err != nil {
					t.Fatalf("the update in range after the fault: %v", err)
				}
				for i := range wantVals {
					if msg := compare(got[i], wantVals[i], forwardTol); msg != "" {
						t.Errorf("%v after the fault, variable input %d: %s", c, i, msg)
					}
				}
			})
		}
	}
}

// randomRuns is how many runs of each random case testRandom draws.
const randomRuns = 3

// testRandom checks the random kernels (device.Random): each run of a
// case is exactly the next run of device.PhiloxUniform's stream (so every
// platform draws the same numbers), and where the stream captures, each
// replay of a captured run draws the run after the last.
func testRandom(t *testing.T, p device.Platform) {
	requireKernels(t, p, device.Random, "device.Random")
	d := open(t, p, device.Options{Count: 1, MemoryLimit: 64 << 20})[0]
	for _, c := range RandomCases() {
		t.Run(c.Op, func(t *testing.T) {
			run, err := Prepare(d, c)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := run.Close(); err != nil {
					t.Error(err)
				}
			}()
			for step := range randomRuns {
				out, err := run.Run()
				if err != nil {
					t.Fatalf("%v, run %d: %v", c, step, err)
				}
				if msg := philoxMismatch(c, uint64(step), out[0]); msg != "" {
					t.Errorf("%v, run %d: %s", c, step, msg)
				}
			}
		})
	}
	if _, ok := d.Stream().(device.Capturer); ok {
		t.Run("Capture", func(t *testing.T) { testRandomCapture(t, d) })
	}
	if st := d.Allocator().Stats(); st.Live != 0 {
		t.Errorf("the random cases left %d allocations (%d bytes) live", st.Live, st.InUse)
	}
}

// philoxMismatch returns "" when out is run step of c's stream, else the
// first element that differs.
func philoxMismatch(c Case, step uint64, out *tensor.Tensor) string {
	want := make([]float32, out.NumElements())
	device.PhiloxUniform(uint64(c.Attrs["seed"].(int)), uint64(c.Attrs["seed2"].(int)), step, want)
	for i, v := range out.Float32s() {
		if v != want[i] {
			return fmt.Sprintf("element %d of %d is %g, want %g (device.PhiloxUniform)", i, len(want), v, want[i])
		}
	}
	return ""
}

// testRandomCapture captures a run of a random kernel after an eager one
// and replays it twice: the replays draw runs 1 and 2.
func testRandomCapture(t *testing.T, d device.Device) {
	c := RandomCases()[2]
	run, err := Prepare(d, c)
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	if _, err := run.Run(); err != nil {
		t.Fatal(err)
	}
	cp := d.Stream().(device.Capturer)
	if err := cp.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	var held []device.Buffer
	kc := &device.Context{Ctx: context.Background(), Node: run.node, Device: d, Stream: d.Stream(), Inputs: run.ins,
		Hold: func(b device.Buffer) { held = append(held, b) }}
	lerr := device.Launch(kc, run.def, run.k)
	g, err := cp.EndCapture()
	if lerr != nil || err != nil {
		t.Fatalf("capturing a run: launch %v, capture %v", lerr, err)
	}
	defer func() {
		g.Close()
		for _, b := range held {
			d.Allocator().Free(b)
		}
		device.FreeAll(d.Allocator(), kc.Outputs)
	}()
	for step := uint64(1); step <= 2; step++ {
		if err := g.Launch(); err != nil {
			t.Fatal(err)
		}
		out, err := download(d, kc.Outputs)
		if err != nil {
			t.Fatal(err)
		}
		if msg := philoxMismatch(c, step, out[0]); msg != "" {
			t.Errorf("replay %d: %s", step, msg)
		}
	}
}
