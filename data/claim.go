package data

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/distflow/distflow/tensor"
)

// ClaimFunc hands out the next block to read: the position of its first
// element in the endless sequence of epochs, where position p is row
// EpochOrder(n, seed, p/n)[p%n]. Claimed calls it once per block, from the
// goroutine that pulls the iterator.
type ClaimFunc func(ctx context.Context) (start int64, err error)

// Claimed returns an endless dataset of the rows of ts (sliced as
// FromTensors does), read blockSize positions at a time from the starts
// that claim hands out (dynamic sharding, as tf.data service's DYNAMIC
// policy): every epoch is one permutation of the rows drawn from seed and
// the epoch number, the same in every process, so processes whose claims
// are disjoint (a fetch-and-add on a shared counter) read each row once
// per epoch between them, however many they are and whoever comes and
// goes. Batch(blockSize, true) after it makes each batch one block. Do not
// Prefetch after it unless claim may run ahead of training: each claim is
// a block taken from the others.
func Claimed(claim ClaimFunc, blockSize int, seed int64, ts ...*tensor.Tensor) (*Dataset, error) {
	if claim == nil {
		return nil, fmt.Errorf("data: Claimed: no claim function")
	}
	if blockSize <= 0 {
		return nil, fmt.Errorf("data: Claimed: block size %d is not positive", blockSize)
	}
	d, err := FromTensors(ts...)
	if err != nil {
		return nil, err
	}
	src := d.open(context.Background(), 0).(*sourceIter).src
	if src.n == 0 {
		return nil, fmt.Errorf("data: Claimed: no rows to read")
	}
	return &Dataset{open: func(ctx context.Context, _ uint64) iter {
		return &claimIter{ctx: ctx, src: src, claim: claim, block: int64(blockSize), seed: seed, epoch: -1}
	}}, nil
}

// EpochOrder is the order of the n rows in epoch of a Claimed dataset with
// seed: a permutation of 0..n-1.
func EpochOrder(n int, seed int64, epoch int64) []int {
	s := mix(uint64(seed), uint64(epoch))
	return rand.New(rand.NewPCG(s, mix(s, 2))).Perm(n)
}

type claimIter struct {
	ctx   context.Context
	src   *source
	claim ClaimFunc
	block int64
	seed  int64
	// pos is the next position to read and end the end of its block.
	pos, end int64
	// order is epoch's permutation.
	epoch int64
	order []int
}

func (it *claimIter) next() (item, error) {
	if it.pos == it.end {
		start, err := it.claim(it.ctx)
		if err != nil {
			return item{}, err
		}
		if start < 0 {
			return item{}, fmt.Errorf("data: Claimed: claimed a block at negative position %d", start)
		}
		it.pos, it.end = start, start+it.block
	}
	n := int64(it.src.n)
	if e := it.pos / n; e != it.epoch {
		it.epoch, it.order = e, EpochOrder(it.src.n, it.seed, e)
	}
	row := it.order[it.pos%n]
	it.pos++
	return item{src: it.src, row: row}, nil
}

func (it *claimIter) close() {}
