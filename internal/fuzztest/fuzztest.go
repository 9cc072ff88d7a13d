// Package fuzztest holds what the fuzz targets of distflow's decoders
// share: writing their seed corpora, and bounding what a decoder allocates.
package fuzztest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/distflow/distflow/internal/race"
)

// WriteSeeds writes the seed corpus of target, testdata/fuzz/<target>/<name>,
// when DISTFLOW_WRITE_FUZZ_SEEDS is set: the committed corpus is made so
// (DISTFLOW_WRITE_FUZZ_SEEDS=1 go test -run '^$' -fuzz ^FuzzX$ -fuzztime 1x).
// Each seed is the fuzz function's arguments, made by the real encoders.
func WriteSeeds(f *testing.F, target string, seeds func() map[string][]any) {
	if os.Getenv("DISTFLOW_WRITE_FUZZ_SEEDS") == "" {
		return
	}
	dir := filepath.Join("testdata", "fuzz", target)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.Fatal(err)
	}
	for name, args := range seeds() {
		var b strings.Builder
		b.WriteString("go test fuzz v1\n")
		for _, a := range args {
			switch v := a.(type) {
			case []byte:
				fmt.Fprintf(&b, "[]byte(%q)\n", v)
			case string:
				fmt.Fprintf(&b, "string(%q)\n", v)
			case bool:
				fmt.Fprintf(&b, "bool(%v)\n", v)
			case int64:
				fmt.Fprintf(&b, "int64(%d)\n", v)
			case uint8:
				fmt.Fprintf(&b, "uint8(%d)\n", v)
			default:
				f.Fatalf("seed %s: argument of type %T", name, a)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(b.String()), 0o644); err != nil {
			f.Fatal(err)
		}
	}
}

// CheckAlloc fails t when fn allocates more than limit bytes
// (runtime.MemStats.TotalAlloc); under the race detector, whose runtime
// allocates more, more than twice limit. It measures twice before failing,
// so that what another goroutine allocated meanwhile is not held against
// fn.
func CheckAlloc(t *testing.T, limit uint64, fn func()) {
	t.Helper()
	if race.Enabled {
		limit *= 2
	}
	var got uint64
	for range 2 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		fn()
		runtime.ReadMemStats(&after)
		if got = after.TotalAlloc - before.TotalAlloc; got <= limit {
			return
		}
	}
	t.Fatalf("allocated %d bytes, more than the limit %d", got, limit)
}
