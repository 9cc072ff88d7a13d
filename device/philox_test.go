package device

import (
	"math"
	"testing"
)

// TestPhilox checks the known-answer vectors of Philox4x32-10 from the
// Random123 distribution (kat_vectors).
func TestPhilox(t *testing.T) {
	for _, c := range []struct {
		ctr  [4]uint32
		key  [2]uint32
		want [4]uint32
	}{
		{[4]uint32{0, 0, 0, 0}, [2]uint32{0, 0}, [4]uint32{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
		{[4]uint32{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, [2]uint32{0xffffffff, 0xffffffff},
			[4]uint32{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
		{[4]uint32{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, [2]uint32{0xa4093822, 0x299f31d0},
			[4]uint32{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
	} {
		if got := Philox(c.ctr, c.key); got != c.want {
			t.Errorf("Philox(%#x, %#x) = %#x, want %#x", c.ctr, c.key, got, c.want)
		}
	}
}

func TestUint32ToFloat(t *testing.T) {
	for _, c := range []struct {
		x    uint32
		want float32
	}{{0, 0}, {0xff800000, 0}, {0x400000, 0.5}, {0xffffffff, 1 - 1.0/(1<<23)}} {
		if got := Uint32ToFloat(c.x); got != c.want {
			t.Errorf("Uint32ToFloat(%#x) = %g, want %g", c.x, got, c.want)
		}
	}
}

// TestPhiloxUniform checks the stream's layout and moments: runs differ,
// a run is blocks of four words, and the values are uniform on [0, 1).
func TestPhiloxUniform(t *testing.T) {
	a, b := make([]float32, 100003), make([]float32, 100003)
	PhiloxUniform(42, 7, 0, a)
	PhiloxUniform(42, 7, 1, b)
	w := Philox([4]uint32{1, 0, 7, 0}, [2]uint32{42, 0})
	if a[5] != Uint32ToFloat(w[1]) {
		t.Errorf("element 5 of run 0 is %g, want word 1 of block 1: %g", a[5], Uint32ToFloat(w[1]))
	}
	same, sum, sq := 0, 0.0, 0.0
	for i := range a {
		if a[i] == b[i] {
			same++
		}
		if a[i] < 0 || a[i] >= 1 {
			t.Fatalf("element %d is %g, outside [0, 1)", i, a[i])
		}
		sum += float64(a[i])
		sq += float64(a[i]) * float64(a[i])
	}
	n := float64(len(a))
	mean, variance := sum/n, sq/n-(sum/n)*(sum/n)
	if same > 10 {
		t.Errorf("runs 0 and 1 agree in %d elements", same)
	}
	if math.Abs(mean-0.5) > 0.005 || math.Abs(variance-1.0/12) > 0.005 {
		t.Errorf("mean %g and variance %g, want 1/2 and 1/12", mean, variance)
	}
}
