// Package cuda is the CUDA platform: NVIDIA GPUs through the driver API,
// with kernels compiled at run time by NVRTC and MatMul through cuBLAS,
// all loaded with purego, so that binaries build with CGO_ENABLED=0 and
// run on machines without a GPU.
//
//	import _ "github.com/distflow/distflow/device/cuda" // registers "cuda"
//
//	p, _ := device.Lookup("cuda")
//	if n, err := p.Probe(); err != nil { // wraps device.ErrUnavailable
//		log.Printf("no GPU: %v", err)
//	}
//	gpus, err := p.Open(device.Options{Logical: 2}) // two devices per card
//
// # Libraries
//
// libcuda (the driver), libnvrtc and libcublas are opened on the first
// Probe or Open, once per process: from the system's library path, then
// DISTFLOW_CUDA_LIB_PATH, $CUDA_HOME/lib64, /usr/local/cuda/lib64,
// /usr/lib/x86_64-linux-gnu and the nvidia/*/lib directories of Python
// environments (where pip puts cuBLAS and NVRTC), newest major version
// first. A library that is missing gives an error wrapping
// device.ErrUnavailable that names it and every place searched. Without
// cuBLAS (or with DISTFLOW_CUDA_NO_CUBLAS set) the products of MatMul and
// the convolutions run a tiled kernel of the package's own.
//
// # TF32
//
// cuBLAS computes in FP32 by default (CUBLAS_DEFAULT_MATH), so products
// and convolutions agree with the CPU's to float32 rounding.
// device.Options.AllowTF32, or DISTFLOW_CUDA_TF32=1 in the environment,
// opts in to TF32 tensor cores (CUBLAS_TF32_TENSOR_OP_MATH) on every
// device opened: on Ampere and later several times faster, but with the
// inputs rounded to 10 bits of mantissa, no longer within the conformance
// suite's 1e-5 of the CPU. This is PyTorch's allow_tf32, off by default
// for the same reason.
//
// # Devices
//
// Each card is opened through its primary context (the one the CUDA
// runtime and cuBLAS use), and each device on it, a card or a logical
// share of one (device.Options.Logical), has a non-blocking stream, a
// cuBLAS handle bound to it, and an allocator over cuMemAlloc with its
// share of the card's memory limit. The handle has a workspace of its own
// (32 MiB on Hopper, 4 MiB before; at most a sixteenth of the device's
// limit), reserved from the driver when the handle is made, so that a
// captured GEMM allocates nothing inside the graph; CUDA graphs are
// instantiated to free, before each replay, anything a library allocated
// in the previous one all the same. CUDA_VISIBLE_DEVICES is applied by
// the driver; Info.Physical is the visible ordinal.
//
// Purego calls run on whatever OS thread the goroutine holds, and CUDA's
// current context is per thread, so every sequence of driver calls locks
// its goroutine to its thread and makes the card's context current first:
// a thread-local store in the driver, cheap next to any call it guards,
// that keeps the calls correct without a thread per device.
//
// Synchronize polls cuStreamQuery with a backoff from 5µs to 1ms, so that
// its context can end the wait; cuStreamSynchronize could not be
// interrupted. Errors name the call, the CUresult and the device, and are
// sticky per stream, as CUDA's are.
//
// Streams capture (device.Capturer) into CUDA graphs, in relaxed mode so
// that the allocator may still reserve memory while a step is captured;
// copies to and from host memory and Synchronize are refused while
// capturing (ErrNotCapturable), which fails the capture but not the
// stream.
//
// # Kernels
//
// The kernels are CUDA C in kernels/*.cu, embedded in the binary and
// compiled by NVRTC on the first Open, once per process and compute
// capability, to PTX for the card's own virtual architecture
// (--gpu-architecture=compute_XY), which the driver compiles for the card
// when it loads the module. NVRTC rather than PTX committed to the
// repository: the machines that build distflow have no nvcc (nor need any
// for a pure-Go build), and PTX made at run time matches the card and the
// driver in use instead of whichever architecture a developer once chose.
// A driver older than NVRTC may reject its PTX; the module is then loaded
// from a CUBIN that NVRTC compiles for the card itself.
//
// Every op of device.Ops has a kernel, for float32 and where the op takes
// or gives them int32, int64 and bool: element-wise ops broadcast by
// strides over up to six merged axes; reductions give one block per output
// element and sum floats in double. SelectV2 broadcasts its three operands
// alike; it, Concat, Split, Slice and Pad (strided box copies, or one
// device copy where a box is contiguous in both layouts) move elements by
// size, in any dtype, and Reshape, ExpandDims, Squeeze and StopGradient
// are one device copy. AddN sums up to eight inputs a launch, in the
// inputs' order as the CPU does; Abs, Sign, Square, Maximum and Minimum
// give the CPU's results bit for bit, signed zeros and NaNs included
// (Go's max and min: a NaN operand wins, +0 is above -0), and Softplus,
// Tanh, Exp, Log and Rsqrt compute in double and round once to float, as
// the CPU's. Softmax, LogSoftmax and SoftmaxCrossEntropyWithLogits run a
// block per row, as the sparse cross-entropy does: the row's maximum
// subtracted in float (the CPU's scan: a NaN first in a row wins, NaNs
// after it are passed over), the exponentials and their sum in double.
// Convolutions (NHWC, filters HWIO) are GEMMs: Conv2D copies each chunk
// of images into an im2col matrix in scratch memory (at most 64 MiB,
// chunk by chunk for larger batches) and multiplies it by the filter on
// cuBLAS; Conv2DBackpropInput multiplies
// the output gradient by the filter's transpose and folds the columns
// back (col2im, a gather); Conv2DBackpropFilter multiplies the im2col
// matrix's transpose by the output gradient, accumulating over chunks. A
// 1x1 filter at stride 1 without padding is one product, without copies.
// Pooling is direct (AvgPool sums each window in the CPU's order), and
// MaxPoolGrad, AvgPoolGrad and col2im gather rather than scatter, so
// results do not depend on scheduling. The optimizers' updates
// (device.Updates) are element-wise kernels that write the
// variable and its slots in place, in float32 as the CPU's rules, and
// AssignAdd and AssignSub (device.VariableOps) add in place. The sparse
// updates (device.SparseUpdates) check each index against the variable's
// rows and link the positions of each index (one thread per index
// scanning the others; from 4096 indices, a bitonic sort of the
// (index, position) keys instead, in log^2 n launches), then one thread
// per gradient element of an index's first position sums that index's
// rows in order and updates the row, in double as the CPU's sparse rules,
// without atomics. Gather checks its indices too. An
// index out of range is written, with its position and a tag naming the
// node, to the device's fault record (32 bytes of device memory outside
// the allocator, reserved by the first launch that reads or writes it);
// the update writes nothing (Gather gives zeros for that index), every
// kernel that writes a variable (the updates, Assign, AssignAdd and
// AssignSub, which is why Assign is a kernel here rather than a copy)
// writes nothing while the record holds a fault, and the device's
// Synchronize, once the stream is idle, reads the record, clears it and
// returns an error wrapping device.ErrIndexOutOfRange, without failing
// the stream: a copy of 32 bytes per Synchronize, on devices that have
// run a Gather or a sparse update only.
// RandomUniform (device.Random) draws from Philox4x32-10 as
// device.PhiloxUniform does, bit for bit; its count of runs lives in eight
// bytes of device memory that a kernel queued after each run increments,
// so that a captured step replays with fresh numbers. A label out of range
// in SparseSoftmaxCrossEntropyWithLogits gives NaN in its row, as
// TensorFlow's GPU kernel does, since checking it would need a
// synchronisation; integer division by zero gives 0.
//
// # Testing without a GPU
//
// The tests compile the kernels for the CPU with g++ (each block's threads
// as fibers, so that shared memory and __syncthreads behave) and run the
// conformance suite (package device/devicetest) on them twice: through an
// emulated device, and through the platform itself over a fake libcuda,
// libnvrtc and libcublas built from them (host memory, per-thread
// contexts, graph capture, a reference column-major SGEMM). Where clang is
// installed they also compile the kernels to PTX. On a GPU the same suite
// runs on the card (scripts/gpu_check.sh).
package cuda
