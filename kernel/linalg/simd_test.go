package linalg

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestChoosePath(t *testing.T) {
	all := []PathInfo{{Name: "avx512"}, {Name: "avx2"}, {Name: "generic"}}
	no512 := []PathInfo{{Name: "avx512", Missing: "avx512f"}, {Name: "avx2"}, {Name: "generic"}}
	none := []PathInfo{{Name: "avx512", Missing: "avx512f"}, {Name: "avx2", Missing: "avx2 and fma"}, {Name: "generic"}}
	for _, tc := range []struct {
		env   string
		ps    []PathInfo
		want  string
		error string // a substring of the error; empty: no error
	}{
		{"", all, "avx512", ""},
		{"auto", no512, "avx2", ""},
		{"avx2", all, "avx2", ""},
		{" AVX2 ", all, "avx2", ""},
		{"generic", all, "generic", ""},
		{"avx512", all, "avx512", ""},
		{"", none, "generic", ""},
		{"avx512", no512, "avx2", "lacks avx512f; using avx2"},
		{"avx512", none, "generic", "lacks avx512f; using generic"},
		{"avx2", none, "generic", "lacks avx2 and fma; using generic"},
		{"sse4", all, "avx512", `"sse4" is not a SIMD path: want one of avx512, avx2, generic`},
		{"off", no512, "avx2", "using avx2"},
	} {
		got, err := choosePath(tc.env, tc.ps)
		if got != tc.want {
			t.Errorf("choosePath(%q, %v) = %q, want %q", tc.env, tc.ps, got, tc.want)
		}
		switch {
		case tc.error == "" && err != nil:
			t.Errorf("choosePath(%q, %v): unexpected error %v", tc.env, tc.ps, err)
		case tc.error != "" && (err == nil || !strings.Contains(err.Error(), tc.error)):
			t.Errorf("choosePath(%q, %v): error %v, want one containing %q", tc.env, tc.ps, err, tc.error)
		}
	}
}

// TestSIMDEnv runs this test binary again under DISTFLOW_SIMD values and
// checks the path it picks and what it logs.
func TestSIMDEnv(t *testing.T) {
	if os.Getenv("LINALG_PRINT_PATH") != "" {
		os.Stdout.WriteString("path=" + Path() + " default=" + Default().Name() + "\n")
		return
	}
	if testing.Short() {
		t.Skip("starts subprocesses")
	}
	best, _ := choosePath("", Paths())
	for _, tc := range []struct{ env, want, log string }{
		{"generic", "generic", ""},
		{"avx2", "avx2", ""},
		{"avx512", "avx512", ""},
		{"", best, ""},
		{"avx-512", best, "not a SIMD path: want one of avx512, avx2, generic"},
	} {
		// A path this CPU lacks falls back (TestChoosePath covers to what).
		want, _ := choosePath(tc.env, Paths())
		if _, err := choosePath(tc.want, Paths()); err == nil && want != tc.want {
			t.Fatalf("choosePath(%q) = %q, want %q", tc.env, want, tc.want)
		}
		cmd := exec.Command(os.Args[0], "-test.run", "^TestSIMDEnv$")
		cmd.Env = append(os.Environ(), "LINALG_PRINT_PATH=1", SIMDEnv+"="+tc.env)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s=%s: %v\n%s", SIMDEnv, tc.env, err, out)
		}
		if w := "path=" + want + " default=" + want + "\n"; !strings.Contains(string(out), w) {
			t.Errorf("%s=%s: output %q, want %q", SIMDEnv, tc.env, out, w)
		}
		if tc.log != "" && !strings.Contains(string(out), tc.log) {
			t.Errorf("%s=%s: output %q, want a warning containing %q", SIMDEnv, tc.env, out, tc.log)
		}
	}
}
