package ops

import (
	"github.com/distflow/distflow/graph"
)

// SaveVariables writes data shard `shard` of `numShards` of the checkpoint
// dir/<basename>-<step> with the values of vars (Variable outputs), read
// under their locks, and returns the shard's description (the JSON of a
// checkpoint.ShardInfo) as a uint8 vector. The node belongs on the device
// of vars (a device function such as the replica device setter puts it
// there); package checkpoint's Saver builds one per device.
func SaveVariables(s *graph.Scope, step graph.Output, vars []graph.Output, dir, basename string, shard, numShards int) graph.Output {
	return s.Out("SaveVariables", "SaveVariables", append([]graph.Output{step}, vars...),
		map[string]any{"dir": dir, "basename": basename, "shard": shard, "num_shards": numShards})
}

// RestoreVariables assigns each of vars (Variable outputs) its value in the
// checkpoint dir/<basename>-<step>, looked up by the variable's name in
// whichever shard holds it. Run the returned node as a target.
func RestoreVariables(s *graph.Scope, step graph.Output, vars []graph.Output, dir, basename string) *graph.Node {
	return s.AddNode("RestoreVariables", "RestoreVariables", append([]graph.Output{step}, vars...),
		map[string]any{"dir": dir, "basename": basename})
}
