package cuda

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/tensor"
)

func TestSearchDirs(t *testing.T) {
	envs := map[string]string{
		"DISTFLOW_CUDA_LIB_PATH": "/opt/a:/opt/b",
		"CUDA_HOME":              "/opt/cuda",
		"VIRTUAL_ENV":            "/venv",
		"HOME":                   "/home/u",
		"PATH":                   "/opt/torch/.venv/bin:/usr/local/bin:/usr/bin:/bin:relative/bin",
	}
	globbed := map[string][]string{
		"/venv/lib/python3*/site-packages/nvidia/*/lib":          {"/venv/lib/python3.12/site-packages/nvidia/cublas/lib"},
		"/usr/lib/python3*/dist-packages/nvidia/*/lib":           {"/usr/lib/python3/dist-packages/nvidia/cuda_nvrtc/lib"},
		"/home/u/.local/lib/python3*/site-packages/nvidia/*/lib": nil,
		"/usr/local/cuda-*/lib64":                                {"/usr/local/cuda-13.0/lib64"},
		"/opt/*":                                                 {"/opt/venv"},
		"/opt/venv/lib/python3*/site-packages/nvidia/*/lib":      {"/opt/venv/lib/python3.11/site-packages/nvidia/cu13/lib"},
		"/usr/local/nvidia/lib*":                                 {"/usr/local/nvidia/lib64", "/usr/local/nvidia/lib"},
		// The GPU machine's image: python3 of a virtualenv that is on PATH
		// but not activated, CUDA 13's wheels all in nvidia/cu13/lib.
		"/opt/torch/.venv/lib/python3*/site-packages/nvidia/*/lib": {"/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib"},
		"/opt/*/.venv": {"/opt/torch/.venv"},
	}
	dirs := searchDirs(func(k string) string { return envs[k] }, func(p string) []string { return globbed[p] })
	want := []string{"/opt/a", "/opt/b", "/opt/cuda/lib64", "/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu",
		"/usr/local/nvidia/lib64", "/usr/local/nvidia/lib",
		"/usr/local/cuda-13.0/lib64", "/venv/lib/python3.12/site-packages/nvidia/cublas/lib",
		"/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib",
		"/usr/lib/python3/dist-packages/nvidia/cuda_nvrtc/lib", "/opt/venv/lib/python3.11/site-packages/nvidia/cu13/lib"}
	if !slices.Equal(dirs, want) {
		t.Errorf("searchDirs =\n%q\nwant\n%q", dirs, want)
	}
}

func TestWorkspaceBytes(t *testing.T) {
	for _, c := range []struct {
		major int
		limit int64
		want  int64
	}{
		{9, 60 << 30, 32 << 20}, // an H200's device
		{8, 60 << 30, 4 << 20},
		{9, 2 << 20, 128 << 10}, // a small device: a sixteenth of it
		{9, 1000, 0},            // too small for one: none
	} {
		if got := workspaceBytes(c.major, c.limit); got != c.want {
			t.Errorf("workspaceBytes(%d, %d) = %d, want %d", c.major, c.limit, got, c.want)
		}
	}
}

func TestFindLib(t *testing.T) {
	dirs := []string{"/d1", "/d2"}
	files := map[string]bool{"/d2/libcublas.so.12": true, "/d2/libcublasLt.so.12": true}
	var opened []string
	open := func(p string) (uintptr, error) {
		opened = append(opened, p)
		if files[p] {
			return 42, nil
		}
		return 0, fmt.Errorf("%s: cannot open shared object file", p)
	}
	l, err := findLib(cublasLib, dirs, open, func(p string) bool { return files[p] })
	if err != nil {
		t.Fatal(err)
	}
	if l.path != "/d2/libcublas.so.12" || l.handle != 42 {
		t.Errorf("found %+v, want /d2/libcublas.so.12", l)
	}
	// The newest version is tried first everywhere, and cuBLASLt is
	// opened from the directory before cuBLAS.
	wantOpened := []string{"libcublas.so.13", "libcublas.so.12", "/d2/libcublasLt.so.12", "/d2/libcublas.so.12"}
	if !slices.Equal(opened, wantOpened) {
		t.Errorf("opened %q, want %q", opened, wantOpened)
	}
}

func TestFindLibMissing(t *testing.T) {
	open := func(p string) (uintptr, error) { return 0, errors.New(p + ": cannot open shared object file") }
	_, err := findLib(nvrtcLib, []string{"/usr/local/cuda/lib64", "/x/nvidia/cuda_nvrtc/lib"}, open, func(string) bool { return false })
	if !errors.Is(err, device.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	for _, want := range []string{"NVRTC", "libnvrtc.so.13", "libnvrtc.so.12", "/usr/local/cuda/lib64", "/x/nvidia/cuda_nvrtc/lib", "DISTFLOW_CUDA_LIB_PATH"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

// TestProbeHere checks the platform on this machine: with a GPU it finds
// cards; without one Probe and Open fail with ErrUnavailable naming what is
// missing, and nothing panics.
func TestProbeHere(t *testing.T) {
	p, err := device.Lookup(Name)
	if err != nil {
		t.Fatal(err)
	}
	n, err := p.Probe()
	if err == nil {
		t.Logf("%d CUDA card(s)", n)
		return
	}
	if !errors.Is(err, device.ErrUnavailable) {
		t.Fatalf("Probe = %v, want an error wrapping ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), "CUDA driver") && !strings.Contains(err.Error(), "GPU") {
		t.Errorf("Probe error %q does not say what is missing", err)
	}
	if _, oerr := p.Open(device.Options{}); !errors.Is(oerr, device.ErrUnavailable) {
		t.Errorf("Open = %v, want ErrUnavailable", oerr)
	}
	t.Logf("Probe: %v", err)
}

func TestErrorNames(t *testing.T) {
	for _, c := range []struct {
		r    cuResult
		name string
		kind error
	}{
		{0, "CUDA_SUCCESS", nil},
		{2, "CUDA_ERROR_OUT_OF_MEMORY", device.ErrOutOfMemory},
		{100, "CUDA_ERROR_NO_DEVICE", device.ErrUnavailable},
		{35, "CUDA_ERROR_INSUFFICIENT_DRIVER", device.ErrUnavailable},
		{600, "CUDA_ERROR_NOT_READY", nil},
		{700, "CUDA_ERROR_ILLEGAL_ADDRESS", nil},
		{222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", nil},
		{12345, "CUresult(12345)", nil},
	} {
		if got := resultName(c.r); got != c.name {
			t.Errorf("resultName(%d) = %q, want %q", c.r, got, c.name)
		}
		if got := driverKind(c.r); got != c.kind {
			t.Errorf("driverKind(%d) = %v, want %v", c.r, got, c.kind)
		}
	}
	e := &Error{Device: "GPU:1", Call: "cuMemAlloc_v2", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY", Detail: "out of memory", kind: device.ErrOutOfMemory}
	if got, want := e.Error(), "cuda: GPU:1: cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (out of memory)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(fmt.Errorf("wrapped: %w", e), device.ErrOutOfMemory) {
		t.Error("an out-of-memory Error does not wrap ErrOutOfMemory")
	}
	if got := statusName(cublasStatusNames, "cublasStatus", 13); got != "CUBLAS_STATUS_EXECUTION_FAILED" {
		t.Errorf("cuBLAS status 13 = %q", got)
	}
	if got := statusName(nvrtcResultNames, "nvrtcResult", 6); got != "NVRTC_ERROR_COMPILATION" {
		t.Errorf("NVRTC result 6 = %q", got)
	}
}

func TestPackArgs(t *testing.T) {
	k, err := packArgs(device.Ptr(0x7000_0000_1000), int32(-2), int64(3), float32(1.5), int32(7), words{4, 5}, float64(0.25), uint32(9))
	if err != nil {
		t.Fatal(err)
	}
	// C alignment: 8-byte values at multiples of 8, 4-byte ones of 4.
	if want := []int{0, 8, 16, 24, 28, 32, 48, 56}; !slices.Equal(k.offs, want) {
		t.Errorf("offsets %v, want %v", k.offs, want)
	}
	le := func(off, n int) uint64 {
		var v uint64
		for i := n - 1; i >= 0; i-- {
			v = v<<8 | uint64(k.buf[off+i])
		}
		return v
	}
	if le(0, 8) != 0x7000_0000_1000 || int32(le(8, 4)) != -2 || le(16, 8) != 3 || math.Float32frombits(uint32(le(24, 4))) != 1.5 ||
		le(28, 4) != 7 || le(32, 8) != 4 || le(40, 8) != 5 || math.Float64frombits(le(48, 8)) != 0.25 || le(56, 4) != 9 {
		t.Errorf("packed bytes % x", k.buf)
	}
	ptrs := k.pointers()
	for i, off := range k.offs {
		if ptrs[i]-ptrs[0] != uintptr(off) {
			t.Errorf("pointer %d at +%d, want +%d", i, ptrs[i]-ptrs[0], off)
		}
	}
	if _, err := packArgs(7); err == nil {
		t.Error("packArgs(int) succeeded: a Go int has no fixed C size")
	}
}

// naiveBroadcast returns the elements of a and b that numpy broadcasting
// pairs at each output index.
func naiveBroadcast(a, b, out []int, i int) (ia, ib int) {
	idx := make([]int, len(out))
	for d := len(out) - 1; d >= 0; d-- {
		idx[d] = i % out[d]
		i /= out[d]
	}
	at := func(s []int) int {
		off, stride := 0, 1
		for d := len(s) - 1; d >= 0; d-- {
			q := idx[d+len(out)-len(s)]
			if s[d] == 1 {
				q = 0
			}
			off += q * stride
			stride *= s[d]
		}
		return off
	}
	return at(a), at(b)
}

func TestBcastPlan(t *testing.T) {
	for _, c := range []struct{ a, b []int }{
		{[]int{3, 4}, []int{3, 4}},
		{[]int{3, 4}, []int{4}},
		{[]int{3, 1}, []int{1, 4}},
		{[]int{}, []int{2, 3}},
		{[]int{2, 1, 3, 1, 5}, []int{3, 4, 5}},
		{[]int{2, 3, 1, 4, 1, 5}, []int{1, 3, 2, 1, 6, 5}},
		{[]int{1}, []int{1}},
		{[]int{0, 3}, []int{3}},
	} {
		p, err := newBcastPlan(c.a, c.b)
		if err != nil {
			t.Errorf("%v, %v: %v", c.a, c.b, err)
			continue
		}
		for i := range tensor.NumElements(p.out) {
			ga, gb := p.index(int64(i))
			wa, wb := naiveBroadcast(c.a, c.b, p.out, i)
			if int(ga) != wa || int(gb) != wb {
				t.Errorf("%v, %v: element %d at (%d, %d), want (%d, %d)", c.a, c.b, i, ga, gb, wa, wb)
				break
			}
		}
		w := p.words()
		if len(w) != 19 || int(w[0]) != len(p.dims) {
			t.Errorf("%v, %v: words %v", c.a, c.b, w)
		}
	}
	if _, err := newBcastPlan([]int{2, 3}, []int{4, 3}); err == nil {
		t.Error("broadcasting [2 3] with [4 3] succeeded")
	}
	// Seven axes that alternate broadcasting cannot merge below seven.
	if _, err := newBcastPlan([]int{2, 1, 2, 1, 2, 1, 2}, []int{1, 2, 1, 2, 1, 2, 1}); err == nil {
		t.Error("a broadcast of 7 unmergeable axes succeeded")
	}
}

func TestBcast3Plan(t *testing.T) {
	for _, c := range []struct{ a, b, c []int }{
		{[]int{3, 4}, []int{3, 4}, []int{3, 4}},
		{[]int{4}, []int{3, 4}, []int{}},
		{[]int{3, 1}, []int{1, 4}, []int{2, 3, 4}},
		{[]int{2, 1, 3, 1, 5}, []int{3, 4, 5}, []int{1, 5}},
		{[]int{}, []int{}, []int{}},
		{[]int{0, 3}, []int{3}, []int{1, 1}},
	} {
		p, err := newBcast3Plan(c.a, c.b, c.c)
		if err != nil {
			t.Errorf("%v, %v, %v: %v", c.a, c.b, c.c, err)
			continue
		}
		for i := range tensor.NumElements(p.out) {
			wa, wb := naiveBroadcast(c.a, c.b, p.out, i)
			wc, _ := naiveBroadcast(c.c, c.c, p.out, i)
			want := [3]int64{int64(wa), int64(wb), int64(wc)}
			var got [3]int64
			for k := range got {
				got[k] = offset(int64(i), p.dims, p.strides[k])
			}
			if got != want {
				t.Errorf("%v, %v, %v: element %d at %v, want %v", c.a, c.b, c.c, i, got, want)
				break
			}
		}
		if w := p.words(); len(w) != 25 || int(w[0]) != len(p.dims) {
			t.Errorf("%v, %v, %v: words %v", c.a, c.b, c.c, w)
		}
	}
	if _, err := newBcast3Plan([]int{2}, []int{3}, []int{3}); err == nil {
		t.Error("broadcasting [2] with [3] and [3] succeeded")
	}
	if _, err := newBcast3Plan([]int{2, 1, 2, 1, 2, 1, 2}, []int{1, 2, 1, 2, 1, 2, 1}, []int{}); err == nil {
		t.Error("a broadcast of 7 unmergeable axes succeeded")
	}
}

func TestBoxPlan(t *testing.T) {
	for _, c := range []struct {
		box, from, to []int // the box, the source's and destination's shapes
		contiguous    bool
	}{
		{[]int{3, 4}, []int{3, 4}, []int{3, 4}, true},
		{[]int{2, 4}, []int{5, 4}, []int{2, 4}, true},  // whole rows
		{[]int{5, 2}, []int{5, 4}, []int{5, 2}, false}, // a block of columns
		{[]int{1, 3, 1}, []int{2, 5, 3}, []int{1, 3, 1}, false},
		{[]int{2, 1, 3}, []int{2, 1, 3}, []int{2, 1, 3}, true},  // a size-1 axis between
		{[]int{2, 3, 4}, []int{2, 3, 4}, []int{2, 5, 4}, false}, // into a wider destination
		{[]int{}, []int{}, []int{}, true},
	} {
		src, dst := rowMajor(c.from), rowMajor(c.to)
		p, err := newBoxPlan(c.box, src, dst)
		if err != nil {
			t.Errorf("%+v: %v", c, err)
			continue
		}
		if p.contiguous() != c.contiguous {
			t.Errorf("%+v: contiguous() = %v (dims %v, strides %v and %v)", c, p.contiguous(), p.dims, p.sa, p.sb)
		}
		// Element i of the box, at coordinates q, is at q in both layouts
		// (the callers add the box's corner to the addresses).
		for i := range tensor.NumElements(c.box) {
			var wa, wb int64
			r := i
			for d := len(c.box) - 1; d >= 0; d-- {
				q := r % c.box[d]
				r /= c.box[d]
				wa += int64(q) * src[d]
				wb += int64(q) * dst[d]
			}
			ga, gb := p.index(int64(i))
			if ga != wa || gb != wb {
				t.Errorf("%+v: element %d at (%d, %d), want (%d, %d)", c, i, ga, gb, wa, wb)
				break
			}
		}
	}
	if _, err := newBoxPlan([]int{2, 2, 2, 2, 2, 2, 2}, rowMajor([]int{3, 3, 3, 3, 3, 3, 3}), rowMajor([]int{2, 2, 2, 2, 2, 2, 2})); err == nil {
		t.Error("a box of 7 unmergeable axes succeeded")
	}
}

func TestReducePlan(t *testing.T) {
	for _, c := range []struct{ shape, axes []int }{
		{[]int{3, 4}, []int{0}},
		{[]int{3, 4}, []int{1}},
		{[]int{3, 4}, []int{0, 1}},
		{[]int{2, 3, 4, 5}, []int{1, 3}},
		{[]int{2, 1, 3, 4}, []int{0, 2}},
		{[]int{2, 3, 4, 5, 6}, []int{0, 1, 4}},
		{[]int{5}, []int{}},
		{[]int{2, 0, 3}, []int{1}},
	} {
		p, err := newReducePlan(c.shape, c.axes)
		if err != nil {
			t.Errorf("%v over %v: %v", c.shape, c.axes, err)
			continue
		}
		// The plan visits each input element once: output o, reduced r.
		n := tensor.NumElements(c.shape)
		seen := make([]int, n)
		for o := range p.nout {
			base := offset(o, p.kdims, p.kstr)
			for r := range p.count {
				seen[base+offset(r, p.rdims, p.rstr)]++
			}
		}
		for i, s := range seen {
			if s != 1 {
				t.Errorf("%v over %v: element %d visited %d times", c.shape, c.axes, i, s)
				break
			}
		}
		// And output o holds the elements whose kept coordinates are o's.
		if n > 0 {
			strides := make([]int, len(c.shape))
			st := 1
			for i := len(c.shape) - 1; i >= 0; i-- {
				strides[i] = st
				st *= c.shape[i]
			}
			for o := range p.nout {
				for r := range p.count {
					e := int(offset(o, p.kdims, p.kstr) + offset(r, p.rdims, p.rstr))
					k := 0
					for i, d := range c.shape {
						if !slices.Contains(c.axes, i) {
							k = k*d + e/strides[i]%d
						}
					}
					if int64(k) != o {
						t.Fatalf("%v over %v: element %d summed into output %d, want %d", c.shape, c.axes, e, o, k)
					}
				}
			}
		}
	}
}

func TestSumToAxes(t *testing.T) {
	axes, err := tensor.SumToAxes([]int{4, 3, 5}, []int{3, 1})
	if err != nil || !slices.Equal(axes, []int{0, 2}) {
		t.Errorf("tensor.SumToAxes([4 3 5], [3 1]) = %v, %v", axes, err)
	}
	if _, err := tensor.SumToAxes([]int{4, 3}, []int{2}); err == nil {
		t.Error("tensor.SumToAxes([4 3], [2]) succeeded")
	}
}

// TestKernelSource checks the embedded program and that every kernel the
// host code launches is defined in it.
func TestKernelSource(t *testing.T) {
	src, err := kernelSource()
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("kernels/*.cu")
	if len(files) == 0 {
		t.Fatal("no kernels/*.cu")
	}
	for _, f := range append(files, "kernels/common.cuh") {
		if !strings.Contains(src, fmt.Sprintf("#line 1 %q", filepath.Base(f))) {
			t.Errorf("the program lacks %s", f)
		}
		raw, _ := os.ReadFile(f)
		if !strings.Contains(src, string(raw)) {
			t.Errorf("the program's copy of %s differs from the file", f)
		}
	}
	if !strings.HasPrefix(src, "#line 1 \"common.cuh\"") {
		t.Error("common.cuh does not come first")
	}
	defined := kernelNames(t, src)
	for _, name := range launchedKernels() {
		if !defined[name] {
			t.Errorf("kernel %s is launched but not defined in kernels/*.cu", name)
		}
	}
}

// kernelNames returns the extern "C" kernels src defines, after the C
// preprocessor has expanded the macros that stamp them out per dtype.
func kernelNames(t *testing.T, src string) map[string]bool {
	t.Helper()
	cpp, err := exec.LookPath("cpp")
	if err != nil {
		t.Skip("no C preprocessor (cpp) to expand the kernels' macros")
	}
	cmd := exec.Command(cpp, "-P", "-x", "c++", "-")
	cmd.Stdin = strings.NewReader(src)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("cpp: %v", err)
	}
	names := map[string]bool{}
	for _, m := range regexp.MustCompile(`extern "C" __global__ void (\w+)\(`).FindAllStringSubmatch(string(out), -1) {
		names[m[1]] = true
	}
	return names
}

// launchedKernels lists the kernel names the host code can launch.
func launchedKernels() []string {
	var names []string
	num := []string{"f32", "i32", "i64"}
	for _, op := range []string{"add", "sub", "mul", "div", "squared_difference", "greater_equal", "equal", "neg", "relu",
		"relu_grad", "bias_add", "reduce_sum", "reduce_sum_short", "maximum", "greater", "abs", "sign", "add_n",
		"minimum", "less", "less_equal", "square"} {
		for _, s := range num {
			names = append(names, op+"_"+s)
		}
	}
	names = append(names, "apply_gradient_descent_f32", "apply_momentum_f32", "apply_adagrad_f32", "apply_rms_prop_f32", "apply_adam_f32",
		"random_uniform_f32", "philox_advance")
	names = append(names, "equal_bool", "sigmoid_f32", "sigmoid_grad_f32", "gemm_f32", "im2col_f32",
		"col2im_f32", "max_pool_f32", "max_pool_grad_f32",
		"sparse_xent_f32_i32", "sparse_xent_f32_i64", "softplus_f32", "tanh_f32", "tanh_grad_f32", "exp_f32", "log_f32",
		"rsqrt_f32", "softmax_f32", "softmax_xent_f32", "avg_pool_f32", "avg_pool_grad_f32")
	for _, b := range []string{"1", "2", "4", "8"} {
		names = append(names, "fill_b"+b, "bcast_b"+b, "select_b"+b, "copy_box_b"+b)
	}
	for _, x := range num {
		for _, i := range []string{"i32", "i64"} {
			names = append(names, "argmax_"+x+"_"+i)
		}
	}
	for _, s := range []string{"f32", "i32", "i64", "bool"} {
		for _, d := range []string{"f32", "i32", "i64", "bool"} {
			if s != d {
				names = append(names, "cast_"+s+"_"+d)
			}
		}
	}
	return names
}

func TestRegistered(t *testing.T) {
	have := device.Kernels(Name)
	for _, op := range device.Ops {
		if !slices.Contains(have, op) {
			t.Errorf("no CUDA kernel for %s", op)
		}
	}
	for _, op := range slices.Concat(device.Random, device.Updates, device.SparseUpdates, device.VariableOps) {
		if !slices.Contains(have, op) {
			t.Errorf("no CUDA kernel for %s", op)
		}
	}
	if len(have) != len(device.Ops)+len(device.Random)+len(device.Updates)+len(device.SparseUpdates)+len(device.VariableOps) {
		t.Errorf("CUDA kernels %v, want exactly device.Ops %v, device.Random %v, device.Updates %v, device.SparseUpdates %v and device.VariableOps %v",
			have, device.Ops, device.Random, device.Updates, device.SparseUpdates, device.VariableOps)
	}
}
