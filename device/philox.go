package device

import (
	crand "crypto/rand"
	"encoding/binary"
	"math"

	"github.com/distflow/distflow/graph"
)

// Random numbers on a device come from Philox4x32-10 (Salmon et al.,
// "Parallel random numbers: as easy as 1, 2, 3", SC 2011), the
// counter-based generator of TensorFlow's random ops: block b of four
// 32-bit words is Philox(counter, key), a pure function, so that any
// thread computes any element without a shared state, and every platform
// computes the same stream. A node's stream has key = its seed; the high
// half of the counter is seed2 plus the number of steps the node has run
// (so each run draws fresh numbers, and a run replayed from a captured
// graph too, the step count living in device memory), the low half the
// block's index within the run. Element i of a run is word i%4 of block
// i/4.

// Philox4x32-10's constants.
const (
	philoxM0 = 0xD2511F53
	philoxM1 = 0xCD9E8D57
	philoxW0 = 0x9E3779B9
	philoxW1 = 0xBB67AE85
)

// Philox returns the block of Philox4x32-10 at counter ctr under key.
func Philox(ctr [4]uint32, key [2]uint32) [4]uint32 {
	for r := 0; r < 10; r++ {
		p0 := uint64(philoxM0) * uint64(ctr[0])
		p1 := uint64(philoxM1) * uint64(ctr[2])
		ctr = [4]uint32{uint32(p1>>32) ^ ctr[1] ^ key[0], uint32(p1), uint32(p0>>32) ^ ctr[3] ^ key[1], uint32(p0)}
		key[0] += philoxW0
		key[1] += philoxW1
	}
	return ctr
}

// Uint32ToFloat maps a random word to [0, 1) as TensorFlow's random ops
// do: its low 23 bits as the mantissa of a float in [1, 2), less one.
func Uint32ToFloat(x uint32) float32 {
	return math.Float32frombits(127<<23|x&0x7fffff) - 1
}

// RandomSeeds returns the key and counter base of a random node's stream
// from its seed and seed2 attributes; both zero, as TensorFlow's, draw a
// fresh seed (from crypto/rand), so that unseeded nodes differ from run to
// run of the program.
func RandomSeeds(n *graph.Node) (key, base uint64) {
	key, base = uint64(n.AttrInt("seed")), uint64(n.AttrInt("seed2"))
	if key == 0 && base == 0 {
		var b [16]byte
		_, _ = crand.Read(b[:]) // never fails on supported platforms
		key, base = binary.LittleEndian.Uint64(b[:8]), binary.LittleEndian.Uint64(b[8:])
	}
	return key, base
}

// PhiloxUniform fills out with run step of the uniform stream of (key,
// base): element i is Uint32ToFloat of word i%4 of the block at counter
// (i/4, base+step).
func PhiloxUniform(key, base, step uint64, out []float32) {
	k := [2]uint32{uint32(key), uint32(key >> 32)}
	hi := base + step
	for b := 0; 4*b < len(out); b++ {
		w := Philox([4]uint32{uint32(b), uint32(uint64(b) >> 32), uint32(hi), uint32(hi >> 32)}, k)
		for j := 0; j < 4 && 4*b+j < len(out); j++ {
			out[4*b+j] = Uint32ToFloat(w[j])
		}
	}
}
