package cuda

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/graph"
)

// faultBytes is the size of struct Fault (kernels/common.cuh): tag, pad,
// pos, index, rows.
const faultBytes = 32

// noFault is a clear record, which the copy that zeroes a new one reads
// (host memory that stays unchanged, as a queued copy needs).
var noFault [faultBytes]byte

// faults is a device's record of the first fault its kernels found on the
// device (an index out of range of a sparse update or a Gather): struct
// Fault in device memory of its own, outside the allocator, that the
// kernels write, the first fault winning, and that the device's
// Synchronize reads once the stream is idle, returns as an error and
// clears. The fault does not fail the stream: the launch that found it
// wrote nothing, the work after it ran, and the kernels that write
// variables, which read the record, wrote nothing. The record is reserved
// on the first launch that reads or writes it, and read at Synchronize
// only once a kernel that may report to it was launched, so that devices
// without such kernels pay nothing there.
type faults struct {
	mem device.Memory

	mu  sync.Mutex
	ptr device.Ptr
	// tags and nodes map the kernels' nodes, by their String (names and
	// ops, which a process's graphs repeat: few, unlike the nodes), to
	// their tags.
	tags  map[string]int32
	nodes []string // by tag-1
}

// record returns the record's address and, for a kernel n that may report
// to it, n's tag (from 1; nil n: a kernel that only reads it, tag 0),
// reserving and zeroing the record on first use through st: a copy from
// the host, which a capture refuses (device.ErrNotCapturable), so that a
// step's first launch, eager, makes it.
func (f *faults) record(st device.Stream, n *graph.Node) (device.Ptr, int32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ptr == 0 {
		p, err := f.mem.Reserve(device.Alignment)
		if err != nil {
			return 0, 0, fmt.Errorf("the fault record: %w", err)
		}
		if err := st.CopyIn(p, noFault[:]); err != nil {
			f.mem.Release(p)
			return 0, 0, err
		}
		f.ptr, f.tags = p, map[string]int32{}
	}
	if n == nil {
		return f.ptr, 0, nil
	}
	name := n.String()
	tag, ok := f.tags[name]
	if !ok {
		f.nodes = append(f.nodes, name)
		tag = int32(len(f.nodes))
		f.tags[name] = tag
	}
	return f.ptr, tag, nil
}

// check reads the record with read (a copy to the host, done when it
// returns) once the stream is idle; a fault found is cleared with zero
// (queued) and returned as an error wrapping device.ErrIndexOutOfRange.
func (f *faults) check(read func(dst []byte, src device.Ptr) error, zero func(dst device.Ptr, n int64) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ptr == 0 || len(f.nodes) == 0 {
		return nil // nothing may have reported
	}
	var rec [faultBytes]byte
	if err := read(rec[:], f.ptr); err != nil {
		return err
	}
	tag := int32(binary.LittleEndian.Uint32(rec[0:]))
	if tag == 0 {
		return nil
	}
	if err := zero(f.ptr, faultBytes); err != nil {
		return err
	}
	pos, index, rows := int64(binary.LittleEndian.Uint64(rec[8:])), int64(binary.LittleEndian.Uint64(rec[16:])), int64(binary.LittleEndian.Uint64(rec[24:]))
	if tag < 1 || int(tag) > len(f.nodes) {
		return fmt.Errorf("cuda: a kernel reported a fault of unknown tag %d (index %d at %d of %d rows): %w", tag, index, pos, rows, device.ErrIndexOutOfRange)
	}
	return device.IndexError(f.nodes[tag-1], pos, index, rows)
}

// release frees the record.
func (f *faults) release() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ptr == 0 {
		return nil
	}
	err := f.mem.Release(f.ptr)
	f.ptr, f.tags, f.nodes = 0, nil, nil
	return err
}
