package layers

import (
	"fmt"
	"strings"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/op"
)

// Towers builds a model once per device for in-graph replication, as
// TensorFlow's multi-tower training: build(ts, i) builds tower i with its
// layers in ts, the name scope "tower_<i>" (s itself for a single device)
// on devices[i] ("": the placement of s). The towers after the first
// build their layers in a scope that reuses variables, so all towers
// share the first one's.
//
// The variables are placed as s places them (its device, or its device
// function: a replica device setter puts them on the ps tasks), not on
// the first tower's device, and so are their initializers and the nodes
// that assign them; each tower reads them where it runs. Errors are
// recorded in s.
func Towers(s *graph.Scope, devices []string, build func(ts *graph.Scope, i int)) {
	if len(devices) == 0 {
		s.SetErr(fmt.Errorf("layers: Towers: no devices to build towers on"))
		return
	}
	for i, d := range devices {
		if s.Err() != nil {
			return
		}
		ts := s
		if len(devices) > 1 {
			ts = s.NameScope(fmt.Sprintf("tower_%d", i))
		}
		if i > 0 {
			ts = ts.ReuseVariables()
		}
		if d != "" {
			ts = ts.WithDeviceFunc(towerDevice(s, d))
		}
		build(ts, i)
	}
}

// towerDevice places the nodes of a tower on device, except its variables,
// their initializers and the nodes that take a variable by reference
// (Assign), which it places as s does.
func towerDevice(s *graph.Scope, device string) graph.DeviceFunc {
	outer, outerFn := s.Device(), s.DeviceFunc()
	variables := map[string]bool{}
	return func(spec *graph.NodeSpec) string {
		if !ofVariable(spec, variables) {
			spec.Device = device
		} else {
			spec.Device = outer
		}
		if outerFn != nil {
			return outerFn(spec)
		}
		return spec.Device
	}
}

// ofVariable says whether spec is a variable, part of a variable's
// initializer or a node taking one by reference; it records the
// variables in variables.
func ofVariable(spec *graph.NodeSpec, variables map[string]bool) bool {
	if spec.Op == "Variable" {
		variables[spec.Name] = true
		return true
	}
	if i := strings.Index(spec.Name, "/Initializer/"); i > 0 && variables[spec.Name[:i]] {
		return true
	}
	def, ok := op.Lookup(spec.Op)
	for i, in := range spec.Inputs {
		if ok && i < len(def.Inputs) && def.Inputs[i].Ref && in.Node != nil && in.Node.Op() == "Variable" {
			return true
		}
	}
	return false
}
