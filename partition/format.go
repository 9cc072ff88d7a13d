package partition

import (
	"fmt"
	"sort"
	"strings"

	"github.com/distflow/distflow/graph"
)

// Format renders partitions in a compact, deterministic text form, one
// section per task (sorted) and one line per node in creation order:
//
//	== /job:ps/task:0
//	W = Variable() @/job:ps/task:0/cpu:0 dtype=float32 shape=[2,2]
//	_send/W_0/to/job_worker/task_0 = Send(W:0) @/job:ps/task:0/cpu:0 recv_device=... send_device=... tensor_name=W:0
//
// Control inputs appear as "^name" after the data inputs. It is meant for
// logs, golden files and error messages.
func Format(parts map[string]*graph.Graph) string {
	tasks := make([]string, 0, len(parts))
	for t := range parts {
		tasks = append(tasks, t)
	}
	sort.Strings(tasks)
	var b strings.Builder
	for _, t := range tasks {
		fmt.Fprintf(&b, "== %s\n", t)
		for _, n := range parts[t].Nodes() {
			var ins []string
			for _, in := range n.Inputs() {
				ins = append(ins, in.Name())
			}
			for _, c := range n.ControlInputs() {
				ins = append(ins, "^"+c.Name())
			}
			fmt.Fprintf(&b, "%s = %s(%s) @%s", n.Name(), n.Op(), strings.Join(ins, ", "), n.Device())
			for _, a := range n.AttrNames() {
				v, _ := n.Attr(a)
				fmt.Fprintf(&b, " %s=%v", a, v)
			}
			b.WriteByte('\n')
		}
	}
	return b.String()
}
