package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestKernelsCompileToPTX compiles the kernels with clang's CUDA front end
// to PTX, where clang is installed: a device-side compiler's check of the
// sources (NVRTC's own runs on the GPU machine only), and that every kernel
// the host launches is an entry of the PTX.
func TestKernelsCompileToPTX(t *testing.T) {
	clang, err := exec.LookPath("clang++")
	if err != nil {
		m, _ := filepath.Glob("/usr/lib/llvm-*/bin/clang++")
		if len(m) == 0 {
			t.Skip("no clang++ to compile the kernels to PTX")
		}
		clang = m[len(m)-1]
	}
	src, err := kernelSource()
	if err != nil {
		t.Fatal(err)
	}
	prelude, err := filepath.Abs("testdata/clang_prelude.h")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cu, ptx := filepath.Join(dir, "kernels.cu"), filepath.Join(dir, "kernels.ptx")
	if err := os.WriteFile(cu, []byte("#include \""+prelude+"\"\n"+src), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(clang, "-x", "cuda", "--cuda-device-only", "--cuda-gpu-arch=sm_70", "-nocudainc", "-nocudalib",
		"-std=c++17", "-O1", "-Werror=return-type", "-S", "-o", ptx, cu).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "cannot find CUDA installation") || strings.Contains(string(out), "unsupported") {
			t.Skipf("clang cannot target CUDA here: %s", out)
		}
		t.Fatalf("clang: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(ptx)
	if err != nil {
		t.Fatal(err)
	}
	entries := map[string]bool{}
	for _, m := range regexp.MustCompile(`\.entry (\w+)\(`).FindAllStringSubmatch(string(raw), -1) {
		entries[m[1]] = true
	}
	for _, name := range launchedKernels() {
		if !entries[name] {
			t.Errorf("kernel %s is not an entry of the PTX", name)
		}
	}
	t.Logf("%d kernels compiled to PTX with %s", len(entries), clang)
}
