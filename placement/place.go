package placement

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/kernel"
)

// Options configures Place.
type Options struct {
	// Devices are the devices nodes may be placed on, usually
	// DevicesOf(spec) narrowed by FilterDevices. Each must name a job and a
	// task; a missing type and index mean "/cpu:0". Earlier devices are
	// preferred when a request matches several.
	Devices []string
	// Default is the session's default device, possibly partial
	// ("/job:worker/task:1"). Each node's request is merged with it (see
	// Device.Merge); soft placement falls back to the first device it
	// matches.
	Default string
	// SoftPlacement lets a node whose request cannot be met (no such
	// device, or no kernel for the op on that device type) go elsewhere:
	// first to a device of the requested task with a kernel, then to the
	// default device. Without it such a node is an error.
	SoftPlacement bool
	// Logger receives a debug record for every soft-placed node; nil means
	// slog.Default().
	Logger *slog.Logger
}

// Place returns the full device ("/job:ps/task:0/cpu:0") of every node of
// nodes.
//
// Each node's requested device (Node.Device) is merged with opts.Default
// and the first device of opts.Devices that matches and has a kernel for
// the op (kernel.Lookup(op, "CPU") for cpu devices) is chosen.
//
// Nodes joined by ref inputs (a Variable and every op that takes it as a
// ref: Assign, Apply*, ...) form a colocation group placed as one: the
// group's request is its variables' requests (then the other members'),
// which must agree (ErrColocation, naming both nodes, otherwise). A group
// may reach outside nodes (a variable not in the list) to find its request,
// but only nodes of the list are returned.
//
// A request that cannot be met is an error wrapping ErrNoDevice that names
// the node, the request and the available devices, unless
// opts.SoftPlacement is set. Place only reads the nodes; it is safe to call
// concurrently on one graph.
func Place(nodes []*graph.Node, opts Options) (map[*graph.Node]string, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	devices, err := parseDevices(opts.Devices)
	if err != nil {
		return nil, err
	}
	def, err := ParseDevice(opts.Default)
	if err != nil {
		return nil, fmt.Errorf("placement: default device: %w", err)
	}
	defIdx := -1
	for i, d := range devices {
		if def.Matches(d) {
			defIdx = i
			break
		}
	}
	if defIdx < 0 {
		return nil, fmt.Errorf("placement: default device %q: %w among %v", opts.Default, ErrNoDevice, opts.Devices)
	}

	groups := colocationGroups(nodes)
	out := make(map[*graph.Node]string, len(nodes))
	for _, grp := range groups {
		req, who, err := groupRequest(grp)
		if err != nil {
			return nil, err
		}
		want := req.Merge(def)
		pick := firstDevice(devices, want, grp)
		if pick < 0 && opts.SoftPlacement {
			relaxed := want
			relaxed.Type, relaxed.Index = "", -1
			if relaxed.Job != "" && relaxed.Task >= 0 {
				pick = firstDevice(devices, relaxed, grp)
			}
			if pick < 0 && hasKernels(devices[defIdx], grp) {
				pick = defIdx
			}
			if pick >= 0 {
				log.LogAttrs(context.Background(), slog.LevelDebug, "placement: soft placement",
					slog.String("node", who.Name()), slog.String("op", who.Op()),
					slog.String("requested", req.String()), slog.String("device", devices[pick].String()),
					slog.Int("colocated", len(grp.members)))
			}
		}
		if pick < 0 {
			return nil, noDeviceError(who, grp, req, want, devices, opts)
		}
		full := devices[pick].String()
		for _, n := range grp.members {
			if grp.inList[n] {
				out[n] = full
			}
		}
	}
	return out, nil
}

// parseDevices parses the available devices, completing a missing type
// and index to cpu:0.
func parseDevices(ss []string) ([]Device, error) {
	if len(ss) == 0 {
		return nil, fmt.Errorf("placement: %w: the device list is empty", ErrNoDevice)
	}
	out := make([]Device, len(ss))
	for i, s := range ss {
		d, err := ParseDevice(s)
		if err != nil {
			return nil, fmt.Errorf("placement: available devices: %w", err)
		}
		if d.Job == "" || d.Task < 0 {
			return nil, fmt.Errorf("placement: available device %q: %w: it must name a job and a task", s, ErrBadDevice)
		}
		if d.Type == "" {
			d.Type = "cpu"
		}
		if d.Index < 0 {
			d.Index = 0
		}
		out[i] = d
	}
	return out, nil
}

// group is one colocation group: nodes joined through ref inputs, in the
// order they were first met.
type group struct {
	members []*graph.Node
	inList  map[*graph.Node]bool
}

// colocationGroups partitions nodes (plus the ref producers they reach)
// into colocation groups with a union-find, in order of first appearance.
func colocationGroups(nodes []*graph.Node) []*group {
	parent := map[*graph.Node]*graph.Node{}
	var order []*graph.Node
	add := func(n *graph.Node) {
		if _, ok := parent[n]; !ok {
			parent[n] = n
			order = append(order, n)
		}
	}
	var find func(n *graph.Node) *graph.Node
	find = func(n *graph.Node) *graph.Node {
		for parent[n] != n {
			parent[n] = parent[parent[n]]
			n = parent[n]
		}
		return n
	}
	inList := make(map[*graph.Node]bool, len(nodes))
	for _, n := range nodes {
		inList[n] = true
		add(n)
		for i, in := range n.Inputs() {
			if n.IsRefInput(i) && in.Node != nil {
				add(in.Node)
				if a, b := find(n), find(in.Node); a != b {
					parent[a] = b
				}
			}
		}
	}
	byRoot := map[*graph.Node]*group{}
	var groups []*group
	for _, n := range order {
		r := find(n)
		g := byRoot[r]
		if g == nil {
			g = &group{inList: inList}
			byRoot[r] = g
			groups = append(groups, g)
		}
		g.members = append(g.members, n)
	}
	return groups
}

// groupRequest merges the explicit requests of a group, variables first,
// and returns it with the node whose request leads (or the first member).
func groupRequest(g *group) (Device, *graph.Node, error) {
	req, who := AnyDevice(), g.members[0]
	var from *graph.Node
	for pass := 0; pass < 2; pass++ {
		for _, n := range g.members {
			if (n.Op() == "Variable") != (pass == 0) {
				continue
			}
			d, err := ParseDevice(n.Device())
			if err != nil {
				return req, nil, fmt.Errorf("placement: node %q (%s): %w", n.Name(), n.Op(), err)
			}
			if n.Device() == "" {
				continue
			}
			if from == nil {
				req, from, who = d, n, n
				continue
			}
			merged, ok := req.Compatible(d)
			if !ok {
				return req, nil, fmt.Errorf("placement: %w: node %q (%s) asks for %q but must share a device with node %q (%s), which asks for %q (they are joined by ref inputs)",
					ErrColocation, n.Name(), n.Op(), n.Device(), from.Name(), from.Op(), from.Device())
			}
			req = merged
		}
	}
	return req, who, nil
}

// firstDevice returns the index of the first device that matches want and
// has kernels for every op of the group, or -1.
func firstDevice(devices []Device, want Device, g *group) int {
	for i, d := range devices {
		if want.Matches(d) && hasKernels(d, g) {
			return i
		}
	}
	return -1
}

// hasKernels reports whether every op of the group has a kernel on d's
// device type.
func hasKernels(d Device, g *group) bool {
	for _, n := range g.members {
		if !hasKernel(n.Op(), d.Type) {
			return false
		}
	}
	return true
}

// hasKernel reports whether op runs on devices of type typ: a CPU kernel,
// or for an accelerator an op every GPU platform runs (device.Runs). The
// task's own placement (package device/taskgraph) then checks the dtype
// against its platform's kernel and may still fall back to its CPU.
func hasKernel(op, typ string) bool {
	if typ == "gpu" {
		return device.Runs(op)
	}
	_, err := kernel.Lookup(op, strings.ToUpper(typ))
	return err == nil
}

// noDeviceError explains why no device fits: none matches, or those that
// match lack a kernel for some op of the group.
func noDeviceError(who *graph.Node, g *group, req, want Device, devices []Device, opts Options) error {
	colo := ""
	if len(g.members) > 1 {
		colo = fmt.Sprintf(" (with %d colocated nodes)", len(g.members)-1)
	}
	for _, d := range devices {
		if !want.Matches(d) {
			continue
		}
		for _, n := range g.members {
			if !hasKernel(n.Op(), d.Type) {
				return fmt.Errorf("placement: node %q (%s)%s: %w: requested device %q (%q after the default %q) has no %s kernel for op %q of node %q; available devices %v",
					who.Name(), who.Op(), colo, ErrNoDevice, req.String(), want.String(), opts.Default, strings.ToUpper(d.Type), n.Op(), n.Name(), opts.Devices)
			}
		}
	}
	return fmt.Errorf("placement: node %q (%s)%s: %w: requested device %q (%q after the default %q) is not among the available devices %v",
		who.Name(), who.Op(), colo, ErrNoDevice, req.String(), want.String(), opts.Default, opts.Devices)
}
