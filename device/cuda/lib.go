package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/distflow/distflow/device"
)

// libSpec names a shared library and where to look for it.
type libSpec struct {
	// what is the library's name in errors: "the CUDA driver".
	what string
	// sonames are tried in order: the newest major version first.
	sonames []string
	// preload lists libraries to open (globally) from the directory the
	// library was found in before opening it, so that a library installed
	// outside the loader's path (a Python wheel) finds its own
	// dependencies: cuBLAS needs cuBLASLt, NVRTC its builtins.
	preload func(dir, soname string) []string
}

var (
	driverLib = libSpec{what: "the CUDA driver", sonames: []string{"libcuda.so.1", "libcuda.so"}}
	nvrtcLib  = libSpec{what: "NVRTC", sonames: []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"},
		preload: func(dir, _ string) []string {
			m, _ := filepath.Glob(filepath.Join(dir, "libnvrtc-builtins.so*"))
			slices.Sort(m)
			slices.Reverse(m) // the newest builtins first
			return m
		}}
	cublasLib = libSpec{what: "cuBLAS", sonames: []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"},
		preload: func(dir, soname string) []string {
			return []string{filepath.Join(dir, strings.Replace(soname, "libcublas", "libcublasLt", 1))}
		}}
)

// env is the environment the search reads: os.Getenv, or a test's map.
type env func(string) string

// searchDirs returns the directories searched after the system's own
// library path, in order, without duplicates: DISTFLOW_CUDA_LIB_PATH (a
// colon-separated list), the CUDA toolkit's usual homes, the driver's
// directory in NVIDIA's containers (/usr/local/nvidia/lib64), and the
// nvidia/*/lib directories of Python environments (virtualenv, conda, those
// whose bin is on PATH, ~/.local, the system's, /opt/* and the virtualenvs
// in them), where pip installs cuBLAS and NVRTC: nvidia/cublas/lib and
// nvidia/cuda_nvrtc/lib for CUDA 12, all in nvidia/cu13/lib for CUDA 13.
// Directories that do not exist are kept only if they were named outright,
// so that an error lists the places that were really looked at.
func searchDirs(getenv env, glob func(string) []string) []string {
	var dirs []string
	add := func(d string) {
		if d != "" && !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	for _, d := range filepath.SplitList(getenv("DISTFLOW_CUDA_LIB_PATH")) {
		add(d)
	}
	for _, v := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if h := getenv(v); h != "" {
			add(filepath.Join(h, "lib64"))
		}
	}
	add("/usr/local/cuda/lib64")
	add("/usr/lib/x86_64-linux-gnu")
	// The driver as NVIDIA's container runtime mounts it, where the
	// loader's path may not name it.
	for _, d := range glob("/usr/local/nvidia/lib*") {
		add(d)
	}
	// Versioned toolkits without the /usr/local/cuda link, newest first.
	for _, d := range glob("/usr/local/cuda-*/lib64") {
		add(d)
	}
	var prefixes []string
	for _, v := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if p := getenv(v); p != "" {
			prefixes = append(prefixes, p)
		}
	}
	// The environment whose python3 a shell would run: its bin is on PATH
	// (an image's /opt/torch/.venv/bin without VIRTUAL_ENV set).
	for _, d := range filepath.SplitList(getenv("PATH")) {
		if filepath.Base(d) == "bin" && filepath.IsAbs(d) {
			prefixes = append(prefixes, filepath.Dir(d))
		}
	}
	if h := getenv("HOME"); h != "" {
		prefixes = append(prefixes, filepath.Join(h, ".local"))
	}
	prefixes = append(prefixes, "/usr/local", "/usr", "/opt/conda")
	// Container images' environments: /opt/venv, /opt/torch/.venv.
	prefixes = append(prefixes, glob("/opt/*")...)
	prefixes = append(prefixes, glob("/opt/*/.venv")...)
	prefixes = append(prefixes, glob("/opt/*/venv")...)
	for _, p := range prefixes {
		for _, pkgs := range []string{"site-packages", "dist-packages"} {
			for _, d := range glob(filepath.Join(p, "lib", "python3*", pkgs, "nvidia", "*", "lib")) {
				add(d)
			}
		}
	}
	if p := getenv("CONDA_PREFIX"); p != "" {
		add(filepath.Join(p, "lib"))
	}
	return dirs
}

// defaultGlob is filepath.Glob without its error (only a bad pattern gives
// one), sorted newest Python first.
func defaultGlob(pattern string) []string {
	m, _ := filepath.Glob(pattern)
	slices.Sort(m)
	slices.Reverse(m)
	return m
}

// opener opens a shared library by path or soname.
type opener func(path string) (uintptr, error)

// loaded is an opened library.
type loaded struct {
	handle uintptr
	path   string // the soname or path it was opened by
}

// findLib opens the first of spec's sonames that the system's library path
// or one of dirs holds. A library missing everywhere gives an error wrapping
// device.ErrUnavailable that names it and every place searched.
func findLib(spec libSpec, dirs []string, open opener, exists func(string) bool) (loaded, error) {
	var lastErr error
	for _, so := range spec.sonames {
		if h, err := open(so); err == nil {
			return loaded{handle: h, path: so}, nil
		} else {
			lastErr = err
		}
		for _, d := range dirs {
			p := filepath.Join(d, so)
			if !exists(p) {
				continue
			}
			if spec.preload != nil {
				for _, dep := range spec.preload(d, so) {
					if exists(dep) {
						open(dep) // best effort: the main open reports what is missing
					}
				}
			}
			h, err := open(p)
			if err == nil {
				return loaded{handle: h, path: p}, nil
			}
			lastErr = err
		}
	}
	return loaded{}, &libError{spec: spec, dirs: dirs, last: lastErr}
}

// libError is a library that could not be loaded.
type libError struct {
	spec libSpec
	dirs []string
	last error
}

func (e *libError) Error() string {
	msg := fmt.Sprintf("cuda: %v: cannot load %s (%s) from the system's library path nor from %s",
		device.ErrUnavailable, e.spec.what, strings.Join(e.spec.sonames, ", "), strings.Join(e.dirs, ", "))
	if e.last != nil {
		msg += " (last error: " + e.last.Error() + ")"
	}
	return msg + "; set DISTFLOW_CUDA_LIB_PATH to the directory that holds it"
}

func (e *libError) Unwrap() error { return device.ErrUnavailable }

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// loadLib finds spec on this machine.
func loadLib(spec libSpec) (loaded, error) {
	if !canLoad {
		return loaded{}, fmt.Errorf("cuda: %w: cannot load %s: the CUDA platform runs on linux only, not %s", device.ErrUnavailable, spec.what, runtime.GOOS)
	}
	return findLib(spec, searchDirs(os.Getenv, defaultGlob), dlopen, fileExists)
}
