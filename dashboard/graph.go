package dashboard

import (
	"strconv"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/graph"
)

// Graph is a model graph with its placement, as the page draws it: every
// node with the task it runs on.
type Graph struct {
	Nodes []Node `json:"nodes"`
}

// Node is one node of a Graph.
type Node struct {
	Name string `json:"name"`
	Op   string `json:"op"`
	// Device is the node's device as the graph asks for it ("" when the
	// graph leaves it to the master).
	Device string `json:"device,omitempty"`
	// Task is the task the node runs on, "/job:ps/task:0".
	Task string `json:"task"`
	// Inputs are the nodes whose outputs this node reads, control inputs
	// included (by name, without output indices).
	Inputs []string `json:"inputs,omitempty"`
}

// FromGraph describes g; nodes without a device, or with one that names no
// task, run on defaultTask (the task whose session runs g, which the
// master gives such nodes).
func FromGraph(g *graph.Graph, defaultTask string) *Graph {
	out := &Graph{}
	for _, n := range g.Nodes() {
		task := defaultTask
		if d, err := cluster.ParseDevice(n.Device()); err == nil && d.Job != "" {
			idx := max(d.Task, 0)
			task = "/job:" + d.Job + "/task:" + strconv.Itoa(idx)
		}
		node := Node{Name: n.Name(), Op: n.Op(), Device: n.Device(), Task: task}
		seen := map[string]bool{}
		for _, in := range n.Inputs() {
			if in.Node != nil && !seen[in.Node.Name()] {
				seen[in.Node.Name()] = true
				node.Inputs = append(node.Inputs, in.Node.Name())
			}
		}
		for _, c := range n.ControlInputs() {
			if !seen[c.Name()] {
				seen[c.Name()] = true
				node.Inputs = append(node.Inputs, c.Name())
			}
		}
		out.Nodes = append(out.Nodes, node)
	}
	return out
}
