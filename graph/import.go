package graph

import (
	"fmt"
	"sort"
	"strings"

	pb "github.com/distflow/distflow/proto/distflowpb"
)

// Import appends the nodes of gd to g, validating each one as FromProto
// does. Inputs may refer to nodes already in g or to earlier nodes of gd;
// a name that already exists is an error. Collections of gd are appended to
// g's collections (their names may refer to old or new nodes).
//
// Import is all or nothing: on error g is left as it was. Like any graph
// building, it must not run concurrently with other builders of g; readers
// see either the old nodes or the old nodes followed by some new ones.
func Import(g *Graph, gd *pb.GraphDef) error {
	if gd.GetVersion() > graphVersion {
		return fmt.Errorf("graph: GraphDef version %d is newer than this build understands (%d)", gd.GetVersion(), graphVersion)
	}
	g.mu.RLock()
	oldLen := len(g.nodes)
	g.mu.RUnlock()
	var added []string
	rollback := func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, n := range g.nodes[oldLen:] {
			delete(g.byName, n.name)
		}
		for _, name := range added {
			delete(g.names, name)
		}
		clear(g.nodes[oldLen:])
		g.nodes = g.nodes[:oldLen]
	}
	for _, nd := range gd.GetNode() {
		spec, err := specFromProto(g, nd)
		if err != nil {
			rollback()
			return err
		}
		g.mu.RLock()
		_, seen := g.names[nd.GetName()]
		g.mu.RUnlock()
		if _, err := g.AddNode(spec); err != nil {
			rollback()
			return err
		}
		if !seen {
			added = append(added, nd.GetName())
		}
	}
	keys := make([]string, 0, len(gd.GetCollections()))
	for k := range gd.GetCollections() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var extra [][2]string
	for _, k := range keys {
		for _, name := range gd.GetCollections()[k].GetNames() {
			if g.Node(name) == nil {
				rollback()
				return fmt.Errorf("graph: collection %q names unknown node %q (%w)", k, name, ErrNotFound)
			}
			extra = append(extra, [2]string{k, name})
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, kv := range extra {
		g.collections[kv[0]] = append(g.collections[kv[0]], kv[1])
	}
	return nil
}

// specFromProto resolves a NodeDef's inputs in g and converts its attributes.
func specFromProto(g *Graph, nd *pb.NodeDef) (NodeSpec, error) {
	spec := NodeSpec{Op: nd.GetOp(), Name: nd.GetName(), Device: nd.GetDevice(), Attrs: map[string]any{}}
	for _, in := range nd.GetInput() {
		if c, ok := strings.CutPrefix(in, "^"); ok {
			n := g.Node(c)
			if n == nil {
				return spec, fmt.Errorf("graph: node %q: control input %q is not defined before it (%w)", nd.GetName(), c, ErrNotFound)
			}
			spec.Control = append(spec.Control, n)
			continue
		}
		o, err := g.Output(in)
		if err != nil {
			return spec, fmt.Errorf("graph: node %q: input %q: %w", nd.GetName(), in, err)
		}
		spec.Inputs = append(spec.Inputs, o)
	}
	for k, av := range nd.GetAttr() {
		v, err := AttrFromProto(av)
		if err != nil {
			return spec, fmt.Errorf("graph: node %q: attribute %q: %w", nd.GetName(), k, err)
		}
		spec.Attrs[k] = v
	}
	return spec, nil
}
