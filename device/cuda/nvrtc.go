package cuda

import (
	"fmt"
	"strings"
	"unsafe"
)

// nvrtc is the subset of NVRTC the platform uses to compile its kernels.
type nvrtc struct {
	lib loaded

	nvrtcVersion, nvrtcGetErrorString, nvrtcCreateProgram, nvrtcCompileProgram, nvrtcGetProgramLogSize,
	nvrtcGetProgramLog, nvrtcGetPTXSize, nvrtcGetPTX, nvrtcGetCUBINSize, nvrtcGetCUBIN, nvrtcDestroyProgram,
	nvrtcGetNumSupportedArchs, nvrtcGetSupportedArchs uintptr

	major, minor int
}

func loadNVRTC() (*nvrtc, error) {
	lib, err := loadLib(nvrtcLib)
	if err != nil {
		return nil, err
	}
	n := &nvrtc{lib: lib}
	if err := resolve(lib, "NVRTC", []sym{
		{dst: &n.nvrtcVersion, names: []string{"nvrtcVersion"}},
		{dst: &n.nvrtcGetErrorString, names: []string{"nvrtcGetErrorString"}},
		{dst: &n.nvrtcCreateProgram, names: []string{"nvrtcCreateProgram"}},
		{dst: &n.nvrtcCompileProgram, names: []string{"nvrtcCompileProgram"}},
		{dst: &n.nvrtcGetProgramLogSize, names: []string{"nvrtcGetProgramLogSize"}},
		{dst: &n.nvrtcGetProgramLog, names: []string{"nvrtcGetProgramLog"}},
		{dst: &n.nvrtcGetPTXSize, names: []string{"nvrtcGetPTXSize"}},
		{dst: &n.nvrtcGetPTX, names: []string{"nvrtcGetPTX"}},
		{dst: &n.nvrtcGetCUBINSize, names: []string{"nvrtcGetCUBINSize"}, optional: true},
		{dst: &n.nvrtcGetCUBIN, names: []string{"nvrtcGetCUBIN"}, optional: true},
		{dst: &n.nvrtcDestroyProgram, names: []string{"nvrtcDestroyProgram"}},
		{dst: &n.nvrtcGetNumSupportedArchs, names: []string{"nvrtcGetNumSupportedArchs"}, optional: true},
		{dst: &n.nvrtcGetSupportedArchs, names: []string{"nvrtcGetSupportedArchs"}, optional: true},
	}); err != nil {
		return nil, err
	}
	var major, minor int32
	if err := n.check("nvrtcVersion", ccall(n.nvrtcVersion, uintptr(unsafe.Pointer(&major)), uintptr(unsafe.Pointer(&minor)))); err != nil {
		return nil, err
	}
	n.major, n.minor = int(major), int(minor)
	return n, nil
}

func (n *nvrtc) check(call string, r uintptr) error {
	code := int(int32(uint32(r)))
	if code == 0 {
		return nil
	}
	e := &Error{Call: call, Code: code, Name: statusName(nvrtcResultNames, "nvrtcResult", code)}
	if s := gostring(ccall(n.nvrtcGetErrorString, uintptr(code))); s != "" && s != e.Name {
		e.Detail = s
	}
	return e
}

// supportedArchs returns the compute capabilities (major*10+minor) NVRTC
// can target, or nil if it cannot say.
func (n *nvrtc) supportedArchs() []int {
	if n.nvrtcGetNumSupportedArchs == 0 || n.nvrtcGetSupportedArchs == 0 {
		return nil
	}
	var k int32
	if n.check("nvrtcGetNumSupportedArchs", ccall(n.nvrtcGetNumSupportedArchs, uintptr(unsafe.Pointer(&k)))) != nil || k <= 0 {
		return nil
	}
	archs := make([]int32, k)
	if n.check("nvrtcGetSupportedArchs", ccall(n.nvrtcGetSupportedArchs, uintptr(unsafe.Pointer(&archs[0])))) != nil {
		return nil
	}
	out := make([]int, k)
	for i, a := range archs {
		out[i] = int(a)
	}
	return out
}

// compile compiles src for arch (major*10+minor) into PTX for a virtual
// architecture (compute_XY), or into a CUBIN for the real one (sm_XY) if
// cubin is set, and returns the image with a trailing NUL (PTX must be a C
// string for cuModuleLoadData).
func (n *nvrtc) compile(src, name string, arch int, cubin bool) ([]byte, error) {
	if cubin && (n.nvrtcGetCUBINSize == 0 || n.nvrtcGetCUBIN == 0) {
		return nil, fmt.Errorf("cuda: NVRTC %d.%d (%s) cannot emit CUBIN", n.major, n.minor, n.lib.path)
	}
	var prog uintptr
	csrc, cname := cstr(src), cstr(name)
	if err := n.check("nvrtcCreateProgram", ccall(n.nvrtcCreateProgram, uintptr(unsafe.Pointer(&prog)),
		uintptr(unsafe.Pointer(&csrc[0])), uintptr(unsafe.Pointer(&cname[0])), 0, 0, 0)); err != nil {
		return nil, err
	}
	defer func() { ccall(n.nvrtcDestroyProgram, uintptr(unsafe.Pointer(&prog))) }()
	target := "compute"
	if cubin {
		target = "sm"
	}
	opts := compileOptions(target, arch)
	cOpts := make([][]byte, len(opts))
	ptrs := make([]uintptr, len(opts))
	for i, o := range opts {
		cOpts[i] = cstr(o)
		ptrs[i] = uintptr(unsafe.Pointer(&cOpts[i][0]))
	}
	err := n.check("nvrtcCompileProgram", ccall(n.nvrtcCompileProgram, prog, uintptr(len(ptrs)), uintptr(unsafe.Pointer(&ptrs[0]))))
	keepAlive(cOpts, csrc, cname)
	if err != nil {
		return nil, fmt.Errorf("%w: options %s:\n%s", err, strings.Join(opts, " "), n.log(prog))
	}
	sizeFn, getFn, what := n.nvrtcGetPTXSize, n.nvrtcGetPTX, "nvrtcGetPTX"
	if cubin {
		sizeFn, getFn, what = n.nvrtcGetCUBINSize, n.nvrtcGetCUBIN, "nvrtcGetCUBIN"
	}
	var size uint64
	if err := n.check(what+"Size", ccall(sizeFn, prog, uintptr(unsafe.Pointer(&size)))); err != nil {
		return nil, err
	}
	img := make([]byte, size+1) // PTX's size counts its NUL; one more keeps a CUBIN's image a C string too
	if err := n.check(what, ccall(getFn, prog, uintptr(unsafe.Pointer(&img[0])))); err != nil {
		return nil, err
	}
	return img, nil
}

// compileOptions are NVRTC's options for target ("compute" or "sm") and
// arch. No fast math: the kernels must agree with the CPU's to 1e-5.
func compileOptions(target string, arch int) []string {
	return []string{
		fmt.Sprintf("--gpu-architecture=%s_%d", target, arch),
		"--std=c++17",
		"--fmad=true",
	}
}

// log returns the compilation log of prog.
func (n *nvrtc) log(prog uintptr) string {
	var size uint64
	if n.check("nvrtcGetProgramLogSize", ccall(n.nvrtcGetProgramLogSize, prog, uintptr(unsafe.Pointer(&size)))) != nil || size == 0 {
		return "(no log)"
	}
	buf := make([]byte, size)
	if n.check("nvrtcGetProgramLog", ccall(n.nvrtcGetProgramLog, prog, uintptr(unsafe.Pointer(&buf[0])))) != nil {
		return "(no log)"
	}
	return strings.TrimRight(string(buf), "\x00\n")
}
