package graph

import (
	"slices"
	"sync"
)

// KeyCache gives the keys (Signature.Key) of the signatures a hot path
// sees step after step without building them again: a step's master and
// workers look up what they derived from its signature at every step, and
// the key, made of the tensors' names, was most of their per-step work on
// the graph. It compares nodes, so every signature given to one cache
// must come from one graph. It is safe for concurrent use.
type KeyCache struct {
	mu     sync.Mutex
	recent [keyCacheSize]keyed
	next   int
}

// keyCacheSize is how many signatures a cache remembers: a training loop
// runs a few (the step, a checkpoint's save, an evaluation).
const keyCacheSize = 8

type keyed struct {
	sig Signature
	key string
}

// Key returns s.Key().
func (c *KeyCache) Key(s Signature) string {
	c.mu.Lock()
	for i := range c.recent {
		if e := &c.recent[i]; e.key != "" && e.sig.same(s) {
			c.mu.Unlock()
			return e.key
		}
	}
	c.mu.Unlock()
	key := s.Key()
	// The caller may reuse its slices for the next step.
	kept := Signature{Feeds: slices.Clone(s.Feeds), Fetches: slices.Clone(s.Fetches), Targets: slices.Clone(s.Targets)}
	c.mu.Lock()
	c.recent[c.next] = keyed{sig: kept, key: key}
	c.next = (c.next + 1) % keyCacheSize
	c.mu.Unlock()
	return key
}

// maxSameCompare bounds the feeds or targets that same compares pairwise;
// a signature with more is keyed by name every time.
const maxSameCompare = 32

// same reports whether s and o have one key without building it: the same
// fetches in the same order, and the same feeds and the same targets as
// sets (Key sorts them and drops duplicates).
func (s Signature) same(o Signature) bool {
	if len(s.Fetches) != len(o.Fetches) || len(s.Feeds) > maxSameCompare || len(o.Feeds) > maxSameCompare ||
		len(s.Targets) > maxSameCompare || len(o.Targets) > maxSameCompare {
		return false
	}
	for i, f := range s.Fetches {
		if f != o.Fetches[i] {
			return false
		}
	}
	return sameSet(s.Feeds, o.Feeds) && sameSet(s.Targets, o.Targets)
}

// sameSet reports whether a and b hold the same elements, duplicates aside.
func sameSet[T comparable](a, b []T) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	for _, x := range b {
		if !slices.Contains(a, x) {
			return false
		}
	}
	return true
}
