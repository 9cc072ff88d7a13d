package cuda

import (
	"fmt"
	"unsafe"

	"github.com/distflow/distflow/device"
)

// launcher is what the kernels need of a device: its stream, kernel
// launches by name, and a GEMM. Device implements it; the tests implement
// it over the kernels compiled for the CPU.
type launcher interface {
	device.Device
	// launch enqueues kernel name on the stream with grid x block threads
	// and args (see packArgs).
	launch(name string, grid, block [3]uint32, args ...any) error
	// sgemm enqueues g through cuBLAS and reports true, or reports false if
	// cuBLAS is not available.
	sgemm(g gemm) (bool, error)
	// faultLog is the device's record of faults found by its kernels,
	// which its Synchronize reports (faults.go).
	faultLog() *faults
}

// threads is the block size of the one-dimensional kernels (THREADS in
// kernels/common.cuh, which the block reductions rely on).
const threads = 256

// maxBlocks bounds a grid: the kernels loop over their work in grid
// strides, so more blocks than the GPU holds at once buys nothing.
const maxBlocks = 1 << 20

// grid1 is the grid of a kernel with one thread per element of n.
func grid1(n int64) [3]uint32 {
	return [3]uint32{uint32(min(max((n+threads-1)/threads, 1), maxBlocks)), 1, 1}
}

// gridRows is the grid of a kernel with one block per row of n.
func gridRows(n int64) [3]uint32 { return [3]uint32{uint32(min(max(n, 1), maxBlocks)), 1, 1} }

var block1 = [3]uint32{threads, 1, 1}

func (d *Device) launch(name string, grid, block [3]uint32, args ...any) error {
	fn, err := d.card.function(d.info.Name, name)
	if err != nil {
		return err
	}
	k, err := packArgs(args...)
	if err != nil {
		return err
	}
	ptrs := k.pointers()
	drv := d.card.drv
	err = d.stream.enqueue("cuLaunchKernel("+name+")", func() uintptr {
		return ccall(drv.cuLaunchKernel, fn, uintptr(grid[0]), uintptr(grid[1]), uintptr(grid[2]),
			uintptr(block[0]), uintptr(block[1]), uintptr(block[2]), 0, d.stream.h, uintptr(unsafe.Pointer(&ptrs[0])), 0)
	})
	keepAlive(k, ptrs)
	return err
}

func (d *Device) faultLog() *faults { return &d.faults }

func (d *Device) sgemm(g gemm) (bool, error) {
	b, h, ok := d.cublasHandle()
	if !ok {
		return false, nil
	}
	d.blasMu.Lock()
	defer d.blasMu.Unlock()
	return true, d.stream.enqueueErr(func() error {
		return b.sgemm(d.info.Name, h, g)
	})
}

// launcherOf returns the launcher of a kernel's context.
func launcherOf(c *device.Context) (launcher, error) {
	l, ok := c.Device.(launcher)
	if !ok {
		return nil, fmt.Errorf("cuda: node %s: a CUDA kernel launched on a %T", c.Node, c.Device)
	}
	if c.Stream != nil && c.Stream != l.Stream() {
		return nil, fmt.Errorf("cuda: node %s: a CUDA kernel launched on another device's stream", c.Node)
	}
	return l, nil
}
