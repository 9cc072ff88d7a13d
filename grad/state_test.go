package grad_test

import (
	"testing"

	"github.com/distflow/distflow/grad"
)

func TestStateOpsHaveNoGradient(t *testing.T) {
	for _, op := range []string{"Assign", "AssignAdd", "AssignSub", "IsVariableInitialized",
		"ApplyGradientDescent", "ApplyMomentum", "ApplyAdagrad", "ApplyRMSProp", "ApplyAdam",
		"RandomNormal", "TruncatedNormal", "RandomUniform"} {
		fn, ok := grad.Lookup(op)
		if !ok || fn != nil || grad.NoneReason(op) == "" {
			t.Errorf("%s: registered %v, function %v, reason %q; want a declared absence of gradient with a reason",
				op, ok, fn != nil, grad.NoneReason(op))
		}
	}
}
