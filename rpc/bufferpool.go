package rpc

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

// bufferPool is the pool of gRPC's message buffers in a process that uses
// this package (its servers, clients and the proto codec's marshalling:
// experimental.SetDefaultBufferPool, set when the package is initialised,
// before any connection). gRPC's default pool clears a buffer's whole
// capacity at every Get, and its tiers jump from 32 KiB to 1 MiB: with it
// every message of 64 KiB (an all-reduce chunk through a summation server)
// is read into a 1 MiB buffer cleared in full, a fifth of a summation
// server's time. This pool's tiers are powers of two and it clears only
// the length asked for (gRPC then overwrites it: clearing keeps a bug of
// gRPC's from showing an earlier message's bytes).
var _ mem.BufferPool = (*bufferPool)(nil)

type bufferPool struct {
	tiers [maxPoolTier + 1]sync.Pool // tier t holds buffers of capacity >= 1<<t
}

// Buffers of 256 B to 64 MiB are pooled; others are allocated and dropped.
const minPoolTier, maxPoolTier = 8, 26

func init() { experimental.SetDefaultBufferPool(&bufferPool{}) }

func (p *bufferPool) Get(length int) *[]byte {
	t := max(bits.Len(uint(max(length, 1)-1)), minPoolTier) // ceil(log2(length))
	if t > maxPoolTier {
		b := make([]byte, length)
		return &b
	}
	if v, ok := p.tiers[t].Get().(*[]byte); ok {
		b := (*v)[:length]
		clear(b)
		*v = b
		return v
	}
	b := make([]byte, length, 1<<t)
	return &b
}

func (p *bufferPool) Put(b *[]byte) {
	t := bits.Len(uint(cap(*b))) - 1 // floor(log2(cap))
	if t < minPoolTier || t > maxPoolTier {
		return
	}
	p.tiers[t].Put(b)
}
