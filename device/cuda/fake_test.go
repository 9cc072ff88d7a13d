//go:build linux

package cuda

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/device/devicetest"
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
			t.Run("Large", func(t *testing.T) { runLarge(t, devs[0]) })
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
