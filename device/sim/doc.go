// Package sim is the simulated accelerator: a device platform that behaves
// as a GPU does for everything but speed, so that placement, partitioning,
// copies, allocation, out-of-memory errors and the runtime's device logic
// are tested on every machine.
//
//	import _ "github.com/distflow/distflow/device/sim" // registers "sim"
//
//	p, _ := device.Lookup("sim")
//	gpus, err := p.Open(device.Options{Count: 2})
//
// Each simulated card has a memory space of its own, held in Go memory
// that no tensor aliases: host code reaches it only through a stream's
// copies, and a device pointer is not a Go address. Each device has one
// stream, a goroutine that runs the copies and kernels queued on it in
// order while the host goes on; an error of queued work is sticky and
// surfaces at Synchronize, as CUDA's do; a fault a kernel reports instead
// of doing its work (a sparse update's index out of range,
// device.ErrIndexOutOfRange, or a CPU kernel's refusal of its values: a
// label out of range, an integer division by zero) surfaces at the next
// Synchronize once, the kernels that write variables writing nothing
// until then, and the stream goes on, as on CUDA: a step with bad data
// fails, and the device serves the next. Kernels run the CPU kernels
// (package kernel/cpu) on the stream, reading their inputs where they lie
// in device memory and copying their results into the outputs the runtime
// allocated, after checking their shapes against the ones inferred before
// the launch. The platform registers a kernel for each op of device.Ops,
// device.Random, device.Updates, device.SparseUpdates and
// device.VariableOps, no more, so that soft placement sends the same ops to
// the CPU as on a real GPU; an update (AssignAdd and AssignSub too) runs
// the CPU's rule on variables holding copies of its ref inputs' device
// memory, and copies them back, a sparse update's out-of-range index
// reported as a fault;
// a random op draws device.PhiloxUniform's stream, as CUDA's kernel does,
// counting its runs on the stream, so that replays draw fresh numbers.
//
// The registered platform has Cards cards of CardBytes each (2 of 1 GiB);
// New makes one of other sizes, and DISTFLOW_SIM_GPUS (cards) and
// DISTFLOW_SIM_GPU_MEMORY (bytes per card) change the registered one.
package sim
