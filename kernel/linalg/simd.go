package linalg

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
)

// SIMDEnv is the environment variable that picks the SIMD path of the
// built-in kernels, read once when the package initialises: "avx512",
// "avx2" or "generic" (plain Go), or empty (or "auto") for the fastest the
// CPU has. A path the CPU lacks falls back to the fastest it has below it,
// and an unknown value to the fastest; both are logged as warnings that
// name the valid values or the missing CPU feature.
const SIMDEnv = "DISTFLOW_SIMD"

// PathInfo describes one built-in SIMD path.
type PathInfo struct {
	// Name is the path's name, as DISTFLOW_SIMD and Path spell it; the
	// backend of a usable path is registered under it.
	Name string
	// Missing, when not empty, names what the path needs that this CPU or
	// build lacks (such as "avx512f"); the path is then not registered.
	Missing string
}

// archPath is a PathInfo with the backend that serves it when usable.
type archPath struct {
	PathInfo
	backend Backend
}

var (
	// paths holds every built-in path, fastest first; set once at init.
	paths []archPath
	// path is the name of the built-in path selected at init.
	path string
)

// Paths returns the built-in SIMD paths, fastest first, whether this CPU
// and build can run them or not. The caller owns the slice.
func Paths() []PathInfo {
	out := make([]PathInfo, len(paths))
	for i, p := range paths {
		out[i] = p.PathInfo
	}
	return out
}

// Path returns the name of the built-in SIMD path in use ("avx512", "avx2"
// or "generic"): the fastest this CPU has, unless DISTFLOW_SIMD chose a
// slower one. Default is that path's backend, except in builds with the
// openblas tag, where Sgemm goes to OpenBLAS and the convolutions' own
// kernels still follow Path.
func Path() string { return path }

func init() {
	paths = append(archPaths(), archPath{PathInfo{Name: "generic"}, genericBackend{}})
	choice, err := choosePath(os.Getenv(SIMDEnv), Paths())
	if err != nil {
		slog.Warn(err.Error())
	}
	path = choice
	for _, p := range paths {
		if p.Missing == "" {
			registry[p.Name] = p.backend
		}
	}
	b := registry[choice]
	def.Store(&b)
}

// choosePath returns the path that the value env of DISTFLOW_SIMD selects
// among ps (fastest first, the last always usable), and an error saying
// why, when it is not the one env names.
func choosePath(env string, ps []PathInfo) (string, error) {
	env = strings.ToLower(strings.TrimSpace(env))
	best := ""
	for _, p := range ps {
		if p.Missing == "" {
			best = p.Name
			break
		}
	}
	if env == "" || env == "auto" {
		return best, nil
	}
	for i, p := range ps {
		if p.Name != env {
			continue
		}
		if p.Missing == "" {
			return p.Name, nil
		}
		for _, q := range ps[i+1:] {
			if q.Missing == "" {
				return q.Name, fmt.Errorf("linalg: %s=%s: this CPU lacks %s; using %s", SIMDEnv, env, p.Missing, q.Name)
			}
		}
	}
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name
	}
	return best, fmt.Errorf("linalg: %s=%q is not a SIMD path: want one of %s, or empty for the fastest; using %s",
		SIMDEnv, env, strings.Join(names, ", "), best)
}
