package op

import "testing"

// hostOps are the ops of this package that reach into the host beyond the
// task's confined directories and so must not run in graphs from other
// processes (Def.Remote unset). There are none today; an op added here
// must leave Remote unset, and every other op must set it.
var hostOps = map[string]bool{}

func TestRemoteAllowlist(t *testing.T) {
	for _, name := range List() {
		d, _ := Lookup(name)
		if d.Remote == hostOps[name] {
			t.Errorf("op %s: Remote is %v; an op a training or serving graph needs sets it, an op in hostOps does not", name, d.Remote)
		}
	}
}
