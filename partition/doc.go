// Package partition splits a placed graph into one graph per task, with a
// Send/Recv pair on every edge that crosses tasks.
//
//	parts, err := partition.Partition(nodes, devices) // devices from placement.Place
//	for task, g := range parts {
//		// register g on task; run it with partition.Sends(g) among its targets
//	}
//
// Partition is a pure function of the nodes and their devices: no I/O, no
// change to the input graph, and deterministic output (node order and names),
// so partitions can be cached, compared and tested as text (Format).
//
// # Names
//
// Original nodes keep their names. Added nodes are named after the tensor
// and the other task, with ":" replaced by "_":
//
//	_send/<node>_<index>/to/<job>_<name>/task_<i>      Send of a tensor, in the source task
//	_recv/<node>_<index>/from/<job>_<name>/task_<i>    its Recv, in the destination task
//	_ctrl/<node>/to/<task>                             dummy Const of a control edge
//	_send/<node>/control/to/<task>, _recv/<node>/control/from/<task>
//
// The tensor_name attribute of a pair is "node:index" for data and "^node"
// for a control edge; with send_device and recv_device it forms the
// rendezvous key (rendezvous.Key), unique within a step.
package partition
