package taskgraph

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/placement"
	"github.com/distflow/distflow/tensor"
)

// Device-resident variables (Config.VariablesOnDevice). A Variable that
// asks for an accelerator lives in that device's memory when every op of
// the graph that takes it by ref can run there: Assign, AssignAdd and
// AssignSub (device.VariableOps), the optimizers' updates (device.Updates,
// and device.SparseUpdates for an embedding's sparse gradient), each for
// the variable's dtype, IsVariableInitialized and the checkpoint ops, which
// the runner runs through the host. Those
// ops then run on the variable's device whatever device they ask for,
// as TensorFlow colocates the users of a ref with their variable, so that
// no ref crosses devices; a read of the variable by the host (a fetch, a
// summary, a loss's input there) crosses as a value, through a Send and
// Recv pair. An op that takes several variables by ref (an update with its
// slots) needs them on one device: if one of them cannot live there, none
// does. A checkpoint op (SaveVariables, RestoreVariables) goes with its
// device variables, which must share one device, and reaches those of
// the host by name in the task's resources: a shard of a checkpoint may
// hold both (partition.SubgraphByDevice). The decision is made over the whole
// graph, not one step's nodes, so that every step of a task finds a
// variable in the same place; the task's resources remember where each
// one went, and a step built later (after the graph grew) that would put
// it elsewhere is refused by name rather than reading a fresh variable.

// variablesKey is the key of the task's device variables in its
// kernel.Resources.
const variablesKey = "device/taskgraph.variables"

// deviceVariables are a task's stores of device variables, one per
// device, and where each variable was placed.
type deviceVariables struct {
	mu     sync.Mutex
	stores map[device.Device]*device.Variables
	order  []device.Device
	where  map[string]int // variable name -> device index, -1 for the host
	closed bool
}

func variablesOf(res *kernel.Resources) *deviceVariables {
	return res.Resource(variablesKey, func() any {
		return &deviceVariables{stores: map[device.Device]*device.Variables{}, where: map[string]int{}}
	}).(*deviceVariables)
}

// store returns d's store, made on first use.
func (dv *deviceVariables) store(d device.Device) (*device.Variables, error) {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	if dv.closed {
		return nil, fmt.Errorf("the device variables of %s were released: %w", d.Info().Name, device.ErrClosed)
	}
	s, ok := dv.stores[d]
	if !ok {
		s = device.NewVariables(d)
		dv.stores[d], dv.order = s, append(dv.order, d)
	}
	return s, nil
}

// settle records where the variables of sub go, and refuses a variable
// that an earlier step placed elsewhere.
func (dv *deviceVariables) settle(sub *graph.Subgraph, varDev map[*graph.Node]int, cfg Config) error {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	for _, n := range sub.AllNodes() {
		if n.Op() != "Variable" {
			continue
		}
		idx, ok := varDev[n]
		if !ok {
			idx = -1
		}
		was, seen := dv.where[n.Name()]
		if !seen {
			dv.where[n.Name()] = idx
			continue
		}
		if was != idx {
			return fmt.Errorf("taskgraph: variable %s lives on %s since an earlier step, and this step would put it on %s (an op added since takes it by ref and cannot run there)",
				n, where(cfg, was), where(cfg, idx))
		}
	}
	return nil
}

func where(cfg Config, idx int) string {
	if idx < 0 {
		return cfg.Task + "/cpu:0"
	}
	return cfg.Task + "/gpu:" + strconv.Itoa(idx)
}

// release closes every store.
func (dv *deviceVariables) release() error {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	dv.closed = true
	var errs []error
	for _, d := range dv.order {
		errs = append(errs, dv.stores[d].Close())
	}
	dv.stores, dv.order = nil, nil
	return errors.Join(errs...)
}

// ReleaseVariables frees the device variables kept in res (see
// Config.VariablesOnDevice), once the executors that read them are
// closed; steps built on res afterwards fail. The owner of res calls it
// when its state ends (a session's Close).
func ReleaseVariables(res *kernel.Resources) error {
	if res == nil {
		return nil
	}
	return variablesOf(res).release()
}

// DeviceVariable describes a variable kept in a device's memory.
type DeviceVariable struct {
	// Device is the device's local name ("GPU:0").
	Device      string
	Name        string
	DType       tensor.DType
	Shape       []int
	Initialized bool
}

// DeviceVariables returns the variables kept in device memory in res (see
// Config.VariablesOnDevice), by device and then name: a task's status
// lists them beside its host variables.
func DeviceVariables(res *kernel.Resources) []DeviceVariable {
	dv := variablesOf(res)
	dv.mu.Lock()
	defer dv.mu.Unlock()
	var out []DeviceVariable
	for _, d := range dv.order {
		st := dv.stores[d]
		for _, name := range st.Names() {
			v, ok := st.Lookup(name)
			if !ok {
				continue
			}
			t := v.Tensor()
			out = append(out, DeviceVariable{Device: d.Info().Name, Name: name, DType: t.DType, Shape: t.Shape, Initialized: v.Initialized()})
		}
	}
	return out
}

// refOps are the runner's own ops that may take a device variable by ref;
// the others are those of device.VariableOps, device.Updates and
// device.SparseUpdates that the platform runs for the variable's dtype.
var refOps = []string{"IsVariableInitialized", "SaveVariables", "RestoreVariables"}

// placeVariables returns the device index of each Variable of g that lives
// on an accelerator.
func placeVariables(g *graph.Graph, cfg Config) map[*graph.Node]int {
	users := map[*graph.Node][]*graph.Node{}
	var refUsers []*graph.Node
	for _, n := range g.Nodes() {
		has := false
		for i, in := range n.Inputs() {
			if n.IsRefInput(i) {
				users[in.Node] = append(users[in.Node], n)
				has = true
			}
		}
		if has {
			refUsers = append(refUsers, n)
		}
	}
	at := map[*graph.Node]int{}
	for _, n := range g.Nodes() {
		if n.Op() != "Variable" {
			continue
		}
		d, err := placement.ParseDevice(n.Device())
		if err != nil || d.Type != "gpu" {
			continue
		}
		idx := max(d.Index, 0)
		if idx >= len(cfg.Devices) {
			continue
		}
		platform := cfg.Devices[idx].Info().Platform
		ok := true
		for _, u := range users[n] {
			ok = ok && refSupported(u, n, platform)
		}
		if ok {
			at[n] = idx
		}
	}
	// An op's refs all live on one device, or all on the host; but a
	// checkpoint op's device variables need only share their device, the
	// host's ones being found by name (partition.SubgraphByDevice).
	for changed := true; changed; {
		changed = false
		for _, u := range refUsers {
			checkpoint := u.Op() == "SaveVariables" || u.Op() == "RestoreVariables"
			idx, one := -2, true
			for i, in := range u.Inputs() {
				if !u.IsRefInput(i) {
					continue
				}
				j, ok := at[in.Node]
				if !ok && checkpoint {
					continue
				}
				if !ok || idx != -2 && j != idx {
					one = false
				}
				idx = j
			}
			if one {
				continue
			}
			for i, in := range u.Inputs() {
				if _, ok := at[in.Node]; ok && u.IsRefInput(i) {
					delete(at, in.Node)
					changed = true
				}
			}
		}
	}
	return at
}

// refSupported reports whether u, which takes variable v by ref, can run
// next to it on platform.
func refSupported(u, v *graph.Node, platform string) bool {
	for i, in := range u.Inputs() {
		if u.IsRefInput(i) && in.Node.Op() != "Variable" {
			return false
		}
	}
	if slices.Contains(refOps, u.Op()) {
		return true // the runner's own
	}
	if !slices.Contains(device.VariableOps, u.Op()) && !slices.Contains(device.Updates, u.Op()) &&
		!slices.Contains(device.SparseUpdates, u.Op()) {
		return false
	}
	def, err := device.LookupKernel(platform, u.Op())
	return err == nil && def.Supports(v.AttrDType("dtype"))
}

// colocated reports whether n is a Variable or takes one by ref (when
// variables may live on devices), and then its device index: the
// variable's, or -1 for the host.
func colocated(n *graph.Node, varDev map[*graph.Node]int) (int, bool) {
	if varDev == nil {
		return 0, false
	}
	if n.Op() == "Variable" {
		if idx, ok := varDev[n]; ok {
			return idx, true
		}
		return -1, true
	}
	refs := false
	for i, in := range n.Inputs() {
		if n.IsRefInput(i) {
			if idx, ok := varDev[in.Node]; ok {
				return idx, true
			}
			refs = true
		}
	}
	if refs {
		return -1, true
	}
	return 0, false
}
