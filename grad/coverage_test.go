package grad_test

import (
	"strings"
	"testing"

	"github.com/distflow/distflow/grad"
	"github.com/distflow/distflow/kernel"
	_ "github.com/distflow/distflow/kernel/cpu"
	"github.com/distflow/distflow/op"
)

// TestEveryOpHasKernelAndGradientDecision checks the registries against each
// other: every declared op has a CPU kernel, and either a gradient or a
// declared reason why it has none.
func TestEveryOpHasKernelAndGradientDecision(t *testing.T) {
	ops := op.List()
	if len(ops) < 50 {
		t.Errorf("only %d ops are registered", len(ops))
	}
	for _, name := range ops {
		if strings.HasPrefix(name, "Test") || strings.Contains(name, "Test") {
			continue // test-only ops registered by other tests of this binary
		}
		if _, err := kernel.Lookup(name, kernel.CPU); err != nil {
			t.Errorf("op %s has no CPU kernel", name)
		}
		fn, ok := grad.Lookup(name)
		switch {
		case !ok:
			t.Errorf("op %s has neither a gradient nor a RegisterNone reason", name)
		case fn == nil && grad.NoneReason(name) == "":
			t.Errorf("op %s is declared without gradient but gives no reason", name)
		}
	}
	for _, name := range grad.List() {
		if _, ok := op.Lookup(name); !ok {
			t.Errorf("gradient registered for unknown op %s", name)
		}
	}
	t.Logf("%d ops, all with a CPU kernel and a gradient decision", len(ops))
}
