package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/distflow/distflow/device"
)

// words is a kernel argument passed by value as a C struct of long longs
// (the Bcast and Reduce structs of kernels/common.cuh).
type words []int64

// kernelArgs are a launch's arguments laid out for cuLaunchKernel: the
// values in one buffer, each at its C alignment, and the array of pointers
// to them that kernelParams is.
type kernelArgs struct {
	buf  []byte
	offs []int
}

// packArgs lays out args, each one of device.Ptr, int32, uint32, int64,
// float32, float64 or words.
func packArgs(args ...any) (*kernelArgs, error) {
	k := &kernelArgs{offs: make([]int, len(args))}
	for i, a := range args {
		var b []byte
		align := 8
		switch v := a.(type) {
		case device.Ptr:
			b = binary.LittleEndian.AppendUint64(nil, uint64(v))
		case int64:
			b = binary.LittleEndian.AppendUint64(nil, uint64(v))
		case float64:
			b = binary.LittleEndian.AppendUint64(nil, math.Float64bits(v))
		case int32:
			b, align = binary.LittleEndian.AppendUint32(nil, uint32(v)), 4
		case uint32:
			b, align = binary.LittleEndian.AppendUint32(nil, v), 4
		case float32:
			b, align = binary.LittleEndian.AppendUint32(nil, math.Float32bits(v)), 4
		case words:
			for _, w := range v {
				b = binary.LittleEndian.AppendUint64(b, uint64(w))
			}
		default:
			return nil, fmt.Errorf("cuda: kernel argument %d has type %T, which has no C layout here", i, a)
		}
		for len(k.buf)%align != 0 {
			k.buf = append(k.buf, 0)
		}
		k.offs[i] = len(k.buf)
		k.buf = append(k.buf, b...)
	}
	if len(k.buf) == 0 {
		k.buf = make([]byte, 8) // so that &buf[0] exists
	}
	return k, nil
}

// pointers returns kernelParams: the address of each argument. k must stay
// reachable (runtime.KeepAlive) until the launch call has returned, which
// copies the values.
func (k *kernelArgs) pointers() []uintptr {
	p := make([]uintptr, max(len(k.offs), 1))
	for i, off := range k.offs {
		p[i] = uintptr(unsafe.Pointer(&k.buf[off]))
	}
	return p
}
