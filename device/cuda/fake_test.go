//go:build linux

package cuda

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/device/devicetest"
	"github.com/distflow/distflow/tensor"
)

// fakeDir returns a directory holding the fake CUDA libraries
// (testdata/fake_cuda.h) as libcuda.so.1, libnvrtc.so.13 and
// libcublas.so.13. It skips where a real driver is installed, which the
// system's library path would find first.
func fakeDir(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("compiling the fake CUDA libraries takes a while")
	}
	if real, _ := device.Lookup(Name); real != nil {
		if _, err := real.Probe(); err == nil || !errors.Is(err, device.ErrUnavailable) || !strings.Contains(err.Error(), "CUDA driver") {
			t.Skip("a CUDA driver is installed here: the fake one would not be loaded")
		}
	}
	fake.once.Do(func() {
		so, err := buildEmu("testdata/fake_cuda.h")
		if err != nil {
			fake.err = err
			return
		}
		fake.dir = filepath.Dir(so)
		for _, name := range []string{"libcuda.so.1", "libnvrtc.so.13", "libcublas.so.13"} {
			if err := os.Symlink(so, filepath.Join(fake.dir, name)); err != nil {
				fake.err = err
				return
			}
		}
	})
	if fake.err != nil {
		if strings.Contains(fake.err.Error(), "no g++") {
			t.Skip(fake.err)
		}
		t.Fatal(fake.err)
	}
	return fake.dir
}

var fake struct {
	once sync.Once
	dir  string
	err  error
}

// TestFakeDriver runs the platform itself (library search and loading,
// every driver, NVRTC and cuBLAS call through purego, contexts, streams,
// the module and the launches) over the fake libraries: the conformance
// suite and the large cases, with cuBLAS and without.
func TestFakeDriver(t *testing.T) {
	dir := fakeDir(t)
	t.Setenv("DISTFLOW_CUDA_LIB_PATH", dir)
	for _, blas := range []bool{true, false} {
		name := "cuBLAS"
		if !blas {
			name = "GEMM kernel"
			t.Setenv("DISTFLOW_CUDA_NO_CUBLAS", "1")
		}
		t.Run(name, func(t *testing.T) {
			p := &Platform{}
			n, err := p.Probe()
			if err != nil || n != 1 {
				t.Fatalf("Probe = %d, %v; want the fake card", n, err)
			}
			if !strings.HasPrefix(p.drv.lib.path, dir) {
				t.Fatalf("the driver was loaded from %s, not the fake one in %s", p.drv.lib.path, dir)
			}
			devicetest.Run(t, p)
			devs, err := p.Open(device.Options{Count: 1, MemoryLimit: 256 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer devs[0].Close()
			if info := devs[0].Info(); info.Model != "Fake GPU" || info.Capability != "9.0" || info.TotalBytes != 1<<30 {
				t.Errorf("Info() = %+v", info)
			}
			d := devs[0].(*Device)
			if _, _, ok := d.cublasHandle(); ok != blas {
				t.Errorf("cuBLAS in use: %v, want %v", ok, blas)
			}
			if blas {
				mode, err := dlsym(p.blas.lib.handle, "fake_cublas_math_mode")
				if err != nil {
					t.Fatal(err)
				}
				if m := int32(ccall(mode)); m != cublasDefaultMath {
					t.Errorf("cuBLAS math mode %d, want FP32 (%d)", m, cublasDefaultMath)
				}
			}
		})
	}
}

// TestFakeDriverErrors checks that a failed call names the call, the
// CUresult, the device and the driver's description.
func TestFakeDriverErrors(t *testing.T) {
	t.Setenv("DISTFLOW_CUDA_LIB_PATH", fakeDir(t))
	p := &Platform{}
	devs, err := p.Open(device.Options{Count: 1, MemoryLimit: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	d := devs[0].(*Device)
	defer d.Close()
	// A block of 2048 threads is beyond any GPU's limit.
	err = d.launch("add_f32", [3]uint32{1, 1, 1}, [3]uint32{2048, 1, 1}, device.Ptr(0), device.Ptr(0), device.Ptr(0), int64(0), words(make([]int64, 19)))
	for _, want := range []string{"cuda: GPU:0: cuLaunchKernel(add_f32): CUDA_ERROR_INVALID_VALUE", "fake error"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("launch error %v, want it to say %q", err, want)
		}
	}
	// The stream stays failed, as CUDA's do.
	if err2 := d.Stream().Zero(0, 0); err2 != nil {
		t.Errorf("a zero-length Zero = %v, want nil (nothing to enqueue)", err2)
	}
	if err2 := d.Stream().Synchronize(t.Context()); err2 == nil {
		t.Error("Synchronize after a failed launch succeeded")
	}
	if _, err := d.card.function("GPU:0", "no_such_kernel"); err == nil || !strings.Contains(err.Error(), "cuModuleGetFunction(no_such_kernel)") {
		t.Errorf("looking up a missing kernel: %v", err)
	}
}

// TestFakeNoVisibleCard: with CUDA_VISIBLE_DEVICES empty the driver's
// cuInit finds no device; Probe's error wraps device.ErrUnavailable and
// names the variable and the driver it loaded.
func TestFakeNoVisibleCard(t *testing.T) {
	dir := fakeDir(t)
	t.Setenv("DISTFLOW_CUDA_LIB_PATH", dir)
	t.Setenv("CUDA_VISIBLE_DEVICES", "")
	_, err := (&Platform{}).Probe()
	if !errors.Is(err, device.ErrUnavailable) {
		t.Fatalf("Probe with no visible card: %v, want ErrUnavailable", err)
	}
	for _, want := range []string{"cuInit", "CUDA_ERROR_NO_DEVICE", `CUDA_VISIBLE_DEVICES=""`, filepath.Join(dir, "libcuda.so.1")} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestFakeCaptureKernels captures kernel launches and a cuBLAS product into
// a CUDA graph and replays it on new inputs.
func TestFakeCaptureKernels(t *testing.T) {
	t.Setenv("DISTFLOW_CUDA_LIB_PATH", fakeDir(t))
	p := &Platform{}
	devs, err := p.Open(device.Options{Count: 1, MemoryLimit: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	d := devs[0]
	defer d.Close()
	c := d.Stream().(device.Capturer)
	a := tensor.MustFromSlice([]float32{1, 2, 3, 4}, 2, 2)
	b := tensor.MustFromSlice([]float32{10, 20, 30, 40}, 2, 2)
	da, _ := device.Upload(d, a)
	db, _ := device.Upload(d, b)
	defer device.FreeAll(d.Allocator(), []*device.Tensor{da, db})
	launch := func(op string) *device.Tensor {
		n, err := devicetest.Node(devicetest.Case{Op: op, Inputs: []*tensor.Tensor{a, b}})
		if err != nil {
			t.Fatal(err)
		}
		def, _ := device.LookupKernel(Name, op)
		k, err := def.Factory(n)
		if err != nil {
			t.Fatal(err)
		}
		kc := &device.Context{Ctx: t.Context(), Node: n, Device: d, Stream: d.Stream(), Inputs: []*device.Tensor{da, db}}
		if err := device.Launch(kc, def, k); err != nil {
			t.Fatal(err)
		}
		return kc.Outputs[0]
	}
	if err := c.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	sum, prod := launch("Add"), launch("MatMul")
	defer device.FreeAll(d.Allocator(), []*device.Tensor{sum, prod})
	g, err := c.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for _, scale := range []float32{1, 2} {
		x := tensor.MustFromSlice([]float32{scale, 2 * scale, 3 * scale, 4 * scale}, 2, 2)
		if err := d.Stream().CopyIn(da.Buf.Ptr, x.RawBytes()); err != nil {
			t.Fatal(err)
		}
		if err := g.Launch(); err != nil {
			t.Fatal(err)
		}
		gs, _ := device.Download(d, sum)
		gp, _ := device.Download(d, prod)
		if err := d.Stream().Synchronize(t.Context()); err != nil {
			t.Fatal(err)
		}
		wantSum := []float32{10 + scale, 20 + 2*scale, 30 + 3*scale, 40 + 4*scale}
		wantProd := []float32{70 * scale, 100 * scale, 150 * scale, 220 * scale}
		if !slices.Equal(gs.Float32s(), wantSum) || !slices.Equal(gp.Float32s(), wantProd) {
			t.Errorf("replay with a scaled by %g: sum %v, product %v; want %v, %v", scale, gs.Float32s(), gp.Float32s(), wantSum, wantProd)
		}
	}
	// A Synchronize while capturing fails the capture, not the stream.
	if err := c.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	if err := d.Stream().Synchronize(t.Context()); !errors.Is(err, device.ErrNotCapturable) {
		t.Errorf("Synchronize while capturing = %v, want ErrNotCapturable", err)
	}
	if _, err := c.EndCapture(); !errors.Is(err, device.ErrNotCapturable) {
		t.Errorf("EndCapture after a Synchronize = %v, want ErrNotCapturable", err)
	}
	if err := d.Stream().Synchronize(t.Context()); err != nil {
		t.Errorf("Synchronize after a failed capture: %v", err)
	}
}

// TestFakeTF32 opens a device with device.Options.AllowTF32: its cuBLAS
// handle computes in TF32 tensor-op math, and the convolutions and
// products still run (the fake cuBLAS computes in FP32 whatever the mode).
func TestFakeTF32(t *testing.T) {
	t.Setenv("DISTFLOW_CUDA_LIB_PATH", fakeDir(t))
	p := &Platform{}
	devs, err := p.Open(device.Options{Count: 1, MemoryLimit: 64 << 20, AllowTF32: true})
	if err != nil {
		t.Fatal(err)
	}
	d := devs[0]
	defer d.Close()
	for _, c := range devicetest.Cases() {
		if c.Op != "Conv2D" && c.Op != "MatMul" {
			continue
		}
		if msg, err := devicetest.Check(d, c); err != nil || msg != "" {
			t.Errorf("%v: %v %s", c, err, msg)
		}
	}
	mode, err := dlsym(p.blas.lib.handle, "fake_cublas_math_mode")
	if err != nil {
		t.Fatal(err)
	}
	if m := int32(ccall(mode)); m != cublasTF32TensorOpMath {
		t.Errorf("cuBLAS math mode %d with AllowTF32, want TF32 (%d)", m, cublasTF32TensorOpMath)
	}
}
