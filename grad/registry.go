package grad

import (
	"fmt"
	"sort"
	"sync"

	"github.com/distflow/distflow/graph"
)

// Func builds the gradient of one node. dys holds one gradient per output of
// n (never the zero Output: missing ones are filled with zeros). It returns
// one gradient per data input of n; the zero Output means "no gradient"
// (for example an integer index input). Errors name shapes; the caller adds
// the node. Builders should record errors in the scope as usual.
type Func func(s *graph.Scope, n *graph.Node, dys []graph.Output) ([]graph.Output, error)

type entry struct {
	fn     Func
	reason string // why the op has no gradient, if fn is nil
}

var (
	mu       sync.RWMutex
	registry = map[string]entry{}
)

// Register sets the gradient function of op. It panics on a duplicate.
func Register(op string, f Func) {
	register(op, entry{fn: f})
}

// RegisterNone declares that op has no gradient, and why (integer outputs,
// comparisons, state updates...). Gradients flowing into such an op stop there.
func RegisterNone(op, reason string) {
	register(op, entry{reason: reason})
}

func register(op string, e entry) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := registry[op]; dup {
		panic(fmt.Sprintf("grad: gradient of %q registered twice", op))
	}
	registry[op] = e
}

// Lookup returns the gradient function of op. ok is false when nothing is
// registered; fn is nil with ok true when the op is declared non-differentiable.
func Lookup(op string) (fn Func, ok bool) {
	mu.RLock()
	defer mu.RUnlock()
	e, ok := registry[op]
	return e.fn, ok
}

// NoneReason returns why op has no gradient, or "" if it has one or is unknown.
func NoneReason(op string) string {
	mu.RLock()
	defer mu.RUnlock()
	return registry[op].reason
}

// List returns the ops with a registered gradient or declared without one.
func List() []string {
	mu.RLock()
	defer mu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
