package cuda

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/device/devicetest"
	"github.com/distflow/distflow/tensor"
)

// realPlatform returns the registered CUDA platform, skipping where this
// machine has no GPU.
func realPlatform(t testing.TB) device.Platform {
	t.Helper()
	p, err := device.Lookup(Name)
	if err != nil {
		t.Fatal(err)
	}
	n, err := p.Probe()
	if err != nil {
		t.Skipf("no CUDA GPU here: %v", err)
	}
	t.Logf("%d CUDA card(s)", n)
	return p
}

// TestConformance runs the device conformance suite on the GPUs of this
// machine; it skips where there is none.
func TestConformance(t *testing.T) {
	devicetest.Run(t, realPlatform(t))
}

// tf32Tol is the error (relative, with a floor of 1 as the suite's) the
// products and convolutions of the conformance cases stay within on TF32
// tensor cores: each operand rounded to 10 bits of mantissa (2^-11
// relative), so a product of unit normals errs by about 4e-4, and a sum
// of n of them by about 4e-4 sqrt(n), which for the largest case (969
// positions of Conv2DBackpropFilter) is 1.2e-2, of which 0.1 is eight
// standard deviations. FP32 stays within 1e-4.
const tf32Tol = 0.1

// TestConformanceTF32 runs the MatMul and convolution cases on a GPU
// opened with AllowTF32, within TF32's tolerance; it skips where there is
// no GPU.
func TestConformanceTF32(t *testing.T) {
	p := realPlatform(t)
	devs, err := p.Open(device.Options{Count: 1, MemoryLimit: 256 << 20, AllowTF32: true})
	if err != nil {
		t.Fatal(err)
	}
	defer devs[0].Close()
	for _, c := range devicetest.Cases() {
		if c.Op != "MatMul" && !strings.HasPrefix(c.Op, "Conv2D") {
			continue
		}
		c.Tol = tf32Tol
		if msg, err := devicetest.Check(devs[0], c); err != nil {
			t.Errorf("%v", err)
		} else if msg != "" {
			t.Errorf("with TF32: %s", msg)
		}
	}
}

// BenchmarkConv2D times the reference CNN's second convolution (a batch
// of 100 14x14x32 maps by a 5x5x32x64 filter, SAME) and its two
// backprops on a GPU, in FP32 and TF32; it skips where there is no GPU.
func BenchmarkConv2D(b *testing.B) {
	p := realPlatform(b)
	r := rand.New(rand.NewPCG(5, 6))
	f := func(shape ...int) *tensor.Tensor {
		t := tensor.New(tensor.Float32, shape...)
		for i := range t.Float32s() {
			t.Float32s()[i] = float32(r.NormFloat64())
		}
		return t
	}
	shape := func(v ...int32) *tensor.Tensor { return tensor.MustFromSlice(v, len(v)) }
	attrs := map[string]any{"padding": "SAME", "strides": []int{1, 1}}
	x, w, dy := f(100, 14, 14, 32), f(5, 5, 32, 64), f(100, 14, 14, 64)
	cases := []devicetest.Case{
		{Op: "Conv2D", Attrs: attrs, Inputs: []*tensor.Tensor{x, w}},
		{Op: "Conv2DBackpropInput", Attrs: attrs, Inputs: []*tensor.Tensor{shape(100, 14, 14, 32), w, dy}},
		{Op: "Conv2DBackpropFilter", Attrs: attrs, Inputs: []*tensor.Tensor{x, shape(5, 5, 32, 64), dy}},
	}
	for _, tf32 := range []bool{false, true} {
		devs, err := p.Open(device.Options{Count: 1, MemoryLimit: 2 << 30, AllowTF32: tf32})
		if err != nil {
			b.Fatal(err)
		}
		d := devs[0]
		math := "FP32"
		if tf32 {
			math = "TF32"
		}
		for _, c := range cases {
			b.Run(c.Op+"/"+math, func(b *testing.B) {
				run, err := devicetest.Prepare(d, c)
				if err != nil {
					b.Fatal(err)
				}
				defer run.Close()
				if err := run.Launch(); err != nil { // loads the kernels, reserves memory
					b.Fatal(err)
				}
				b.ResetTimer()
				for range b.N {
					if err := run.Launch(); err != nil {
						b.Fatal(err)
					}
				}
				if err := d.Stream().Synchronize(context.Background()); err != nil {
					b.Fatal(err)
				}
			})
		}
		d.Close()
	}
}
