package cuda

import (
	"fmt"
	"os"
	"runtime"
	"unsafe"
)

// sym is a C function of a loaded library to resolve: the first of names
// that the library exports (a _v2 entry point before its older name).
type sym struct {
	dst      *uintptr
	names    []string
	optional bool
}

// resolve looks syms up in the library at handle.
func resolve(lib loaded, what string, syms []sym) error {
	for _, s := range syms {
		for _, n := range s.names {
			if p, err := dlsym(lib.handle, n); err == nil && p != 0 {
				*s.dst = p
				break
			}
		}
		if *s.dst == 0 && !s.optional {
			return fmt.Errorf("cuda: %s (%s) has no %v: it is too old or not %s", lib.path, what, s.names, what)
		}
	}
	return nil
}

// cstr returns s as a NUL-terminated C string in Go memory.
func cstr(s string) []byte { return append([]byte(s), 0) }

// gostring copies the NUL-terminated C string at p.
func gostring(p uintptr) string {
	if p == 0 {
		return ""
	}
	// The double conversion keeps vet's unsafeptr check quiet about
	// memory that is C's, not Go's.
	base := *(*unsafe.Pointer)(unsafe.Pointer(&p))
	n := 0
	for *(*byte)(unsafe.Add(base, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(base), n))
}

// driver is the subset of the CUDA driver API the platform uses.
type driver struct {
	lib loaded

	cuInit, cuDriverGetVersion, cuDeviceGetCount, cuDeviceGet, cuDeviceGetName, cuDeviceTotalMem,
	cuDeviceGetAttribute, cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease, cuCtxSetCurrent,
	cuMemAlloc, cuMemFree, cuMemGetInfo, cuStreamCreate, cuStreamDestroy, cuStreamSynchronize,
	cuStreamQuery, cuMemcpyHtoDAsync, cuMemcpyDtoHAsync, cuMemcpyDtoDAsync, cuMemsetD8Async,
	cuModuleLoadData, cuModuleUnload, cuModuleGetFunction, cuLaunchKernel, cuGetErrorName,
	cuGetErrorString uintptr

	// CUDA graphs (stream capture); zero where the driver has none.
	cuStreamBeginCapture, cuStreamEndCapture, cuGraphInstantiate, cuGraphLaunch, cuGraphDestroy,
	cuGraphExecDestroy uintptr

	version int // cuDriverGetVersion: 12080 is CUDA 12.8
}

// Device attributes of cuda.h's CUdevice_attribute.
const (
	attrMultiprocessorCount    = 16
	attrComputeCapabilityMajor = 75
	attrComputeCapabilityMinor = 76
)

// cuStreamCaptureModeRelaxed lets the capturing stream's device allocate
// memory (cuMemAlloc) from any thread while it captures, which the
// allocator may do when a captured step first needs more.
const cuStreamCaptureModeRelaxed = 2

// cudaGraphInstantiateFlagAutoFreeOnLaunch frees, before each launch, what
// the graph's previous launch allocated and did not free. The platform's
// own captures allocate nothing inside the graph (the allocator reserves
// outside it, and cuBLAS has a workspace of its own), but a library that
// allocates stream-ordered while captured would otherwise make every
// replay after the first fail.
const cudaGraphInstantiateFlagAutoFreeOnLaunch = 1

// canCapture reports whether the driver has the graph API.
func (d *driver) canCapture() bool {
	return d.cuStreamBeginCapture != 0 && d.cuStreamEndCapture != 0 && d.cuGraphInstantiate != 0 &&
		d.cuGraphLaunch != 0 && d.cuGraphDestroy != 0 && d.cuGraphExecDestroy != 0
}

// cuStreamNonBlocking keeps the stream from synchronising with the legacy
// default stream, which libraries may use.
const cuStreamNonBlocking = 1

// loadDriver opens libcuda, resolves the API and initialises it.
func loadDriver() (*driver, error) {
	lib, err := loadLib(driverLib)
	if err != nil {
		return nil, err
	}
	d := &driver{lib: lib}
	if err := resolve(lib, "the CUDA driver", []sym{
		{dst: &d.cuInit, names: []string{"cuInit"}},
		{dst: &d.cuDriverGetVersion, names: []string{"cuDriverGetVersion"}},
		{dst: &d.cuDeviceGetCount, names: []string{"cuDeviceGetCount"}},
		{dst: &d.cuDeviceGet, names: []string{"cuDeviceGet"}},
		{dst: &d.cuDeviceGetName, names: []string{"cuDeviceGetName"}},
		{dst: &d.cuDeviceTotalMem, names: []string{"cuDeviceTotalMem_v2"}},
		{dst: &d.cuDeviceGetAttribute, names: []string{"cuDeviceGetAttribute"}},
		{dst: &d.cuDevicePrimaryCtxRetain, names: []string{"cuDevicePrimaryCtxRetain"}},
		{dst: &d.cuDevicePrimaryCtxRelease, names: []string{"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"}},
		{dst: &d.cuCtxSetCurrent, names: []string{"cuCtxSetCurrent"}},
		{dst: &d.cuMemAlloc, names: []string{"cuMemAlloc_v2"}},
		{dst: &d.cuMemFree, names: []string{"cuMemFree_v2"}},
		{dst: &d.cuMemGetInfo, names: []string{"cuMemGetInfo_v2"}},
		{dst: &d.cuStreamCreate, names: []string{"cuStreamCreate"}},
		{dst: &d.cuStreamDestroy, names: []string{"cuStreamDestroy_v2", "cuStreamDestroy"}},
		{dst: &d.cuStreamSynchronize, names: []string{"cuStreamSynchronize"}},
		{dst: &d.cuStreamQuery, names: []string{"cuStreamQuery"}},
		{dst: &d.cuMemcpyHtoDAsync, names: []string{"cuMemcpyHtoDAsync_v2"}},
		{dst: &d.cuMemcpyDtoHAsync, names: []string{"cuMemcpyDtoHAsync_v2"}},
		{dst: &d.cuMemcpyDtoDAsync, names: []string{"cuMemcpyDtoDAsync_v2"}},
		{dst: &d.cuMemsetD8Async, names: []string{"cuMemsetD8Async"}},
		{dst: &d.cuModuleLoadData, names: []string{"cuModuleLoadData"}},
		{dst: &d.cuModuleUnload, names: []string{"cuModuleUnload"}},
		{dst: &d.cuModuleGetFunction, names: []string{"cuModuleGetFunction"}},
		{dst: &d.cuLaunchKernel, names: []string{"cuLaunchKernel"}},
		{dst: &d.cuGetErrorName, names: []string{"cuGetErrorName"}, optional: true},
		{dst: &d.cuGetErrorString, names: []string{"cuGetErrorString"}, optional: true},
		{dst: &d.cuStreamBeginCapture, names: []string{"cuStreamBeginCapture_v2"}, optional: true},
		{dst: &d.cuStreamEndCapture, names: []string{"cuStreamEndCapture"}, optional: true},
		{dst: &d.cuGraphInstantiate, names: []string{"cuGraphInstantiateWithFlags"}, optional: true},
		{dst: &d.cuGraphLaunch, names: []string{"cuGraphLaunch"}, optional: true},
		{dst: &d.cuGraphDestroy, names: []string{"cuGraphDestroy"}, optional: true},
		{dst: &d.cuGraphExecDestroy, names: []string{"cuGraphExecDestroy"}, optional: true},
	}); err != nil {
		return nil, err
	}
	if err := d.check("", "cuInit", ccall(d.cuInit, 0)); err != nil {
		if v, set := os.LookupEnv("CUDA_VISIBLE_DEVICES"); set {
			// The driver applies it at cuInit: say which cards it hid.
			return nil, fmt.Errorf("%w (the driver %s, CUDA_VISIBLE_DEVICES=%q)", err, lib.path, v)
		}
		return nil, fmt.Errorf("%w (the driver %s)", err, lib.path)
	}
	var v int32
	if err := d.check("", "cuDriverGetVersion", ccall(d.cuDriverGetVersion, uintptr(unsafe.Pointer(&v)))); err != nil {
		return nil, err
	}
	d.version = int(v)
	return d, nil
}

// check turns the CUresult r of call into an error naming the call, the
// result and the device (dev, empty when there is none yet).
func (d *driver) check(dev, call string, r uintptr) error {
	res := cuResult(int32(uint32(r))) // the C enum is 32 bits; the register's upper half is junk
	if res == cudaSuccess {
		return nil
	}
	e := &Error{Device: dev, Call: call, Code: int(res), Name: resultName(res), kind: driverKind(res)}
	if d.cuGetErrorName != 0 {
		var p uintptr
		if ccall(d.cuGetErrorName, uintptr(res), uintptr(unsafe.Pointer(&p))) == 0 && p != 0 {
			e.Name = gostring(p)
		}
	}
	if d.cuGetErrorString != 0 {
		var p uintptr
		if ccall(d.cuGetErrorString, uintptr(res), uintptr(unsafe.Pointer(&p))) == 0 && p != 0 {
			e.Detail = gostring(p)
		}
	}
	return e
}

// result returns the CUresult of r.
func result(r uintptr) cuResult { return cuResult(int32(uint32(r))) }

// withContext runs f on one OS thread with ctx current.
//
// Calls through purego run on whichever OS thread the goroutine has, and
// CUDA's current context is per thread. Locking the thread for the whole
// sequence and setting the context at its start (a thread-local store in
// the driver, far cheaper than any call it guards) makes every sequence
// correct wherever it runs, without a dedicated thread per device and the
// channel hop each call would then cost.
func (d *driver) withContext(dev string, ctx uintptr, f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := d.check(dev, "cuCtxSetCurrent", ccall(d.cuCtxSetCurrent, ctx)); err != nil {
		return err
	}
	return f()
}

// deviceCount returns the number of visible cards (after
// CUDA_VISIBLE_DEVICES, which the driver applies).
func (d *driver) deviceCount() (int, error) {
	var n int32
	if err := d.check("", "cuDeviceGetCount", ccall(d.cuDeviceGetCount, uintptr(unsafe.Pointer(&n)))); err != nil {
		return 0, err
	}
	return int(n), nil
}

// cardInfo describes a card by its visible ordinal.
type cardInfo struct {
	dev          int32 // CUdevice
	name         string
	total        int64
	major, minor int
	sms          int
}

func (d *driver) cardInfo(ordinal int) (cardInfo, error) {
	var ci cardInfo
	name := fmt.Sprintf("card %d", ordinal)
	if err := d.check(name, "cuDeviceGet", ccall(d.cuDeviceGet, uintptr(unsafe.Pointer(&ci.dev)), uintptr(ordinal))); err != nil {
		return ci, err
	}
	buf := make([]byte, 256)
	if err := d.check(name, "cuDeviceGetName", ccall(d.cuDeviceGetName, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(ci.dev))); err != nil {
		return ci, err
	}
	for i, b := range buf {
		if b == 0 {
			buf = buf[:i]
			break
		}
	}
	ci.name = string(buf)
	var total uint64
	if err := d.check(name, "cuDeviceTotalMem_v2", ccall(d.cuDeviceTotalMem, uintptr(unsafe.Pointer(&total)), uintptr(ci.dev))); err != nil {
		return ci, err
	}
	ci.total = int64(total)
	for _, a := range []struct {
		attr int
		dst  *int
	}{{attrComputeCapabilityMajor, &ci.major}, {attrComputeCapabilityMinor, &ci.minor}, {attrMultiprocessorCount, &ci.sms}} {
		var v int32
		if err := d.check(name, "cuDeviceGetAttribute", ccall(d.cuDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a.attr), uintptr(ci.dev))); err != nil {
			return ci, err
		}
		*a.dst = int(v)
	}
	return ci, nil
}
