//go:build linux

package cuda

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/device/devicetest"
	"github.com/distflow/distflow/tensor"
)

// The emulated platform runs the package's host code and its CUDA C
// kernels, compiled for the CPU with g++ (testdata/emu_shim.h), through the
// conformance suite: each launch runs with the grid and block the host
// code chose, a block at a time with a fiber per thread of the block (see
// testdata/emu_shim.h), and device memory is Go memory. What it does not
// check is the driver, cuBLAS, and the GPU's own scheduling and rounding.

var emu struct {
	once   sync.Once
	launch uintptr
	err    error
}

// emuLibrary builds and loads the kernels for the CPU once per test run.
func emuLibrary(t *testing.T) uintptr {
	t.Helper()
	if testing.Short() {
		t.Skip("compiling the kernels for the CPU takes a while")
	}
	emu.once.Do(func() {
		var so string
		if so, emu.err = buildEmu(""); emu.err != nil {
			return
		}
		h, err := dlopen(so)
		if err != nil {
			emu.err = err
			return
		}
		emu.launch, emu.err = dlsym(h, "emu_launch")
	})
	if emu.err != nil {
		if strings.Contains(emu.err.Error(), "no g++") {
			t.Skip(emu.err)
		}
		t.Fatal(emu.err)
	}
	return emu.launch
}

// buildEmu compiles the kernels for the CPU with the emulation's launcher
// and the testdata file extra (if any) into a shared library, and returns
// its path. -Bsymbolic binds each library to its own kernels and state:
// the emulation and the fake driver are both loaded, with the same names.
// Without _FORTIFY_SOURCE, whose longjmp check refuses the jumps between
// the fibers' stacks.
func buildEmu(extra string) (string, error) {
	gxx, err := exec.LookPath("g++")
	if err != nil {
		return "", fmt.Errorf("no g++ to compile the kernels for the CPU: %w", err)
	}
	src, err := kernelSource()
	if err != nil {
		return "", err
	}
	names, err := preprocessedKernels(src)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, f := range []string{"testdata/emu_shim.h", "", "testdata/emu_main.h"} {
		if f == "" {
			b.WriteString(src)
			continue
		}
		raw, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		b.Write(raw)
	}
	b.WriteString("const entry emu_kernels[] = {\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  {%q, [](void** p) { call(%s, p); }, [](void** p) { return save(%s, p); }},\n", n, n, n)
	}
	fmt.Fprintf(&b, "};\nconst int emu_nkernels = %d;\n", len(names))
	if extra != "" {
		raw, err := os.ReadFile(extra)
		if err != nil {
			return "", err
		}
		b.Write(raw)
	}
	dir, err := os.MkdirTemp("", "cuda-emu")
	if err != nil {
		return "", err
	}
	cpp, so := filepath.Join(dir, "emu.cpp"), filepath.Join(dir, "libemu.so")
	if err := os.WriteFile(cpp, []byte(b.String()), 0o644); err != nil {
		return "", err
	}
	out, err := exec.Command(gxx, "-std=c++17", "-O1", "-w", "-U_FORTIFY_SOURCE", "-D_FORTIFY_SOURCE=0", "-shared", "-fPIC", "-Wl,-Bsymbolic", "-o", so, cpp).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("g++: %v\n%s", err, out)
	}
	builtLibs = append(builtLibs, so)
	return so, nil
}

// preprocessedKernels lists the kernels of src after macro expansion.
func preprocessedKernels(src string) ([]string, error) {
	cmd := exec.Command("cpp", "-P", "-x", "c++", "-")
	cmd.Stdin = strings.NewReader(src)
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("cpp: %w", err)
	}
	var names []string
	for _, m := range regexp.MustCompile(`extern "C" __global__ void (\w+)\(`).FindAllStringSubmatch(string(out), -1) {
		names = append(names, m[1])
	}
	return names, nil
}

// emuPlatform presents the emulated kernels as the "cuda" platform (not
// registered: the real one is).
type emuPlatform struct{ launch uintptr }

func (p *emuPlatform) Name() string        { return Name }
func (p *emuPlatform) Probe() (int, error) { return 1, nil }

func (p *emuPlatform) Open(opts device.Options) ([]device.Device, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	const total = 1 << 30
	per := max(opts.Logical, 1)
	n := opts.Count
	if n == 0 {
		n = per - opts.First
	}
	if opts.First+n > per {
		return nil, fmt.Errorf("emu: devices %d to %d of one card of %d: %w", opts.First, opts.First+n-1, per, device.ErrUnavailable)
	}
	devs := make([]device.Device, n)
	for i := range devs {
		name := fmt.Sprintf("GPU:%d", i)
		d := &emuDevice{p: p, mem: &emuMemory{regions: map[device.Ptr][]byte{}}, info: device.Info{
			Name: name, Platform: Name, Model: "emulated", Logical: opts.First + i, TotalBytes: total, LimitBytes: opts.Limit(total, per)}}
		d.alloc = device.NewAllocator(name, d.mem, d.info.LimitBytes)
		d.stream = &emuStream{mem: d.mem}
		d.faults.mem = d.mem
		d.stream.faults = &d.faults
		devs[i] = d
	}
	return devs, nil
}

type emuDevice struct {
	p      *emuPlatform
	info   device.Info
	mem    *emuMemory
	alloc  *device.Allocator
	stream *emuStream
	faults faults
}

func (d *emuDevice) Info() device.Info            { return d.info }
func (d *emuDevice) Allocator() *device.Allocator { return d.alloc }
func (d *emuDevice) Stream() device.Stream        { return d.stream }
func (d *emuDevice) Close() error                 { return errors.Join(d.alloc.Close(), d.faults.release()) }
func (d *emuDevice) faultLog() *faults            { return &d.faults }

func (d *emuDevice) sgemm(gemm) (bool, error) { return false, nil }

func (d *emuDevice) launch(name string, grid, block [3]uint32, args ...any) error {
	k, err := packArgs(args...)
	if err != nil {
		return err
	}
	ptrs := k.pointers()
	cname := cstr(name)
	d.stream.mu.Lock()
	defer d.stream.mu.Unlock()
	r := ccall(d.p.launch, uintptr(unsafe.Pointer(&cname[0])), uintptr(grid[0]), uintptr(grid[1]), uintptr(grid[2]),
		uintptr(block[0]), uintptr(block[1]), uintptr(block[2]), uintptr(unsafe.Pointer(&ptrs[0])))
	keepAlive(k, ptrs, cname)
	if int32(r) != 0 {
		return fmt.Errorf("emu: no kernel %s", name)
	}
	return nil
}

// emuMemory is device memory in Go slices, addressed by their addresses.
type emuMemory struct {
	mu      sync.Mutex
	regions map[device.Ptr][]byte
}

func (m *emuMemory) Reserve(n int64) (device.Ptr, error) {
	b := make([]byte, n+device.Alignment)
	off := device.Alignment - int(uintptr(unsafe.Pointer(&b[0]))%device.Alignment)
	p := device.Ptr(uintptr(unsafe.Pointer(&b[off])))
	m.mu.Lock()
	m.regions[p] = b
	m.mu.Unlock()
	return p, nil
}

func (m *emuMemory) Release(p device.Ptr) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.regions[p]; !ok {
		return fmt.Errorf("emu: release of %#x", uint64(p))
	}
	delete(m.regions, p)
	return nil
}

func (m *emuMemory) Info() (free, total int64, err error) { return 1 << 30, 1 << 30, nil }

// bytes returns n bytes at device address p (Go memory the map keeps
// alive).
func (m *emuMemory) bytes(p device.Ptr, n int64) []byte {
	u := uintptr(p)
	return unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&u))), n)
}

// emuStream runs everything at once, in order.
type emuStream struct {
	mem    *emuMemory
	faults *faults
	mu     sync.Mutex
}

func (s *emuStream) CopyIn(dst device.Ptr, src []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	copy(s.mem.bytes(dst, int64(len(src))), src)
	return nil
}

func (s *emuStream) CopyOut(dst []byte, src device.Ptr) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	copy(dst, s.mem.bytes(src, int64(len(dst))))
	return nil
}

func (s *emuStream) Copy(dst, src device.Ptr, n int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	copy(s.mem.bytes(dst, n), s.mem.bytes(src, n))
	return nil
}

func (s *emuStream) Zero(dst device.Ptr, n int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.mem.bytes(dst, n))
	return nil
}

func (s *emuStream) Synchronize(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.faults.check(s.CopyOut, s.Zero)
}

// TestEmulatedConformance runs the conformance suite on the package's
// kernels and host code compiled for the CPU.
func TestEmulatedConformance(t *testing.T) {
	devicetest.Run(t, &emuPlatform{launch: emuLibrary(t)})
}

// TestEmulatedSparseSort runs the conformance suite with the sparse
// updates linking every count of indices by sorting them (sparseLinks),
// not only the largest case's.
func TestEmulatedSparseSort(t *testing.T) {
	p := &emuPlatform{launch: emuLibrary(t)}
	saved := sparseSortFrom
	sparseSortFrom = 1
	defer func() { sparseSortFrom = saved }()
	devicetest.Run(t, p)
}

// TestEmulatedHostInput gives a kernel a device input as a host value (a
// Shape's result feeding an Add): the kernel copies it to the device, and
// the runtime's context keeps the host value.
func TestEmulatedHostInput(t *testing.T) {
	devs, err := (&emuPlatform{launch: emuLibrary(t)}).Open(device.Options{Count: 1, MemoryLimit: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	d := devs[0]
	defer d.Close()
	x, y := tensor.MustFromSlice([]int32{1, 2, 3}, 3), tensor.MustFromSlice([]int32{10, 20, 30}, 3)
	n, err := devicetest.Node(devicetest.Case{Op: "Add", Inputs: []*tensor.Tensor{x, y}})
	if err != nil {
		t.Fatal(err)
	}
	def, _ := device.LookupKernel(Name, "Add")
	k, err := def.Factory(n)
	if err != nil {
		t.Fatal(err)
	}
	dx, err := device.Upload(d, x)
	if err != nil {
		t.Fatal(err)
	}
	hy := &device.Tensor{DType: y.DType(), Shape: y.Shape(), Host: y}
	kc := &device.Context{Ctx: context.Background(), Node: n, Device: d, Stream: d.Stream(), Inputs: []*device.Tensor{dx, hy}}
	if err := device.Launch(kc, def, k); err != nil {
		t.Fatal(err)
	}
	if kc.Inputs[1] != hy || hy.Host == nil {
		t.Error("the launch changed the runtime's inputs")
	}
	got, err := device.Download(d, kc.Outputs[0])
	if err != nil {
		t.Fatal(err)
	}
	d.Stream().Synchronize(context.Background())
	if !slices.Equal(got.Int32s(), []int32{11, 22, 33}) {
		t.Errorf("Add(device, host) = %v, want [11 22 33]", got.Int32s())
	}
	device.FreeAll(d.Allocator(), append(kc.Outputs, dx))
	if st := d.Allocator().Stats(); st.Live != 0 {
		t.Errorf("%d allocations left live", st.Live)
	}
}

// TestMain removes the directories of the CPU builds of the kernels, which
// stay loaded until the process ends. With DISTFLOW_CUDA_KEEP_FAKE=1 it
// keeps them and prints where, so that a binary can run over the fake
// driver: DISTFLOW_CUDA_LIB_PATH=DIR distflow train --gpus 1.
func TestMain(m *testing.M) {
	code := m.Run()
	for _, so := range builtLibs {
		if os.Getenv("DISTFLOW_CUDA_KEEP_FAKE") == "1" {
			fmt.Fprintln(os.Stderr, "kept", filepath.Dir(so))
			continue
		}
		os.RemoveAll(filepath.Dir(so))
	}
	os.Exit(code)
}

// builtLibs are the libraries buildEmu made in this process.
var builtLibs []string

// TestEmulatedConvChunks runs the convolution cases with an im2col scratch
// bound of a few kilobytes, so that every non-1x1 convolution runs in
// several chunks of images (Conv2DBackpropFilter summing over them).
func TestEmulatedConvChunks(t *testing.T) {
	p := &emuPlatform{launch: emuLibrary(t)}
	saved := convScratch
	convScratch = 4 << 10
	defer func() { convScratch = saved }()
	devs, err := p.Open(device.Options{Count: 1, MemoryLimit: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	d := devs[0]
	defer d.Close()
	n := 0
	for _, c := range devicetest.Cases() {
		if !strings.HasPrefix(c.Op, "Conv2D") {
			continue
		}
		n++
		if msg, err := devicetest.Check(d, c); err != nil {
			t.Errorf("%v: %v", c, err)
		} else if msg != "" {
			t.Errorf("%v: %s", c, msg)
		}
	}
	if n == 0 {
		t.Fatal("no convolution cases")
	}
	// Launches of a prepared case (as BenchmarkConv2D times them) leave
	// nothing allocated.
	for _, c := range devicetest.Cases() {
		if c.Op != "Conv2DBackpropFilter" {
			continue
		}
		run, err := devicetest.Prepare(d, c)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := run.Launch(); err != nil {
				t.Fatal(err)
			}
		}
		if err := run.Close(); err != nil {
			t.Fatal(err)
		}
		break
	}
	if st := d.Allocator().Stats(); st.Live != 0 {
		t.Errorf("%d allocations left live", st.Live)
	}
}
