package placement

import (
	"sync"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/op"
	"github.com/distflow/distflow/tensor"
)

// Strategy chooses the ps task of each new variable.
type Strategy int

const (
	// RoundRobin puts the k-th variable on ps task k mod PSTasks.
	RoundRobin Strategy = iota
	// GreedyBySize puts each variable on the ps task holding the fewest
	// bytes so far (shape x dtype size; ties go to the lower task), which
	// balances memory and traffic when variable sizes differ.
	GreedyBySize
)

// String returns "round-robin" or "greedy-by-size".
func (s Strategy) String() string {
	if s == GreedyBySize {
		return "greedy-by-size"
	}
	return "round-robin"
}

// ReplicaConfig configures ReplicaDeviceSetter.
type ReplicaConfig struct {
	// PSTasks is the number of ps tasks. With 0, variables are treated like
	// every other node (they get WorkerDevice).
	PSTasks int
	// PSJob is the parameter servers' job name; "" means "ps".
	PSJob string
	// WorkerDevice is merged under the request of every node that is not a
	// variable or a user of one ("/job:worker/task:1").
	WorkerDevice string
	// Strategy picks each variable's ps task.
	Strategy Strategy
	// PSOps lists the ops placed on ps tasks; nil means {"Variable"}.
	PSOps []string
}

// ReplicaDeviceSetter returns a graph.DeviceFunc for between-graph
// replication, as TensorFlow's replica_device_setter:
//
//   - a variable (an op of PSOps) goes to "/job:<PSJob>/task:<k>", k chosen
//     by the strategy; parts the node requests itself win, and a variable
//     pinned to another job stays there;
//   - an op with a ref input (Assign, Apply*, ...) follows its variable's
//     device, so the update runs where the variable lives;
//   - every other node gets WorkerDevice merged under its own request (its
//     explicit job/task wins; see Device.Merge).
//
// Use it with Scope.WithDeviceFunc:
//
//	s := graph.NewScope().WithDeviceFunc(placement.ReplicaDeviceSetter(placement.ReplicaConfig{
//		PSTasks: 2, WorkerDevice: "/job:worker/task:1", Strategy: placement.GreedyBySize,
//	}))
//
// The function keeps the strategy's state (the next task, the bytes per
// task) and is safe for concurrent use. A request that does not parse is
// returned unchanged, for Place to report with the node's name.
func ReplicaDeviceSetter(cfg ReplicaConfig) graph.DeviceFunc {
	if cfg.PSJob == "" {
		cfg.PSJob = "ps"
	}
	psOps := map[string]bool{}
	if cfg.PSOps == nil {
		cfg.PSOps = []string{"Variable"}
	}
	for _, o := range cfg.PSOps {
		psOps[o] = true
	}
	worker, werr := ParseDevice(cfg.WorkerDevice)
	st := &setterState{bytes: make([]int64, max(cfg.PSTasks, 0))}
	return func(spec *graph.NodeSpec) string {
		for i, in := range spec.Inputs {
			if isRefInput(spec, i) && in.Node != nil {
				return in.Node.Device()
			}
		}
		req, err := ParseDevice(spec.Device)
		if err != nil || werr != nil {
			return spec.Device
		}
		if cfg.PSTasks > 0 && psOps[spec.Op] && (req.Job == "" || req.Job == cfg.PSJob) {
			ps := Device{Job: cfg.PSJob, Task: req.Task, Type: req.Type, Index: req.Index}
			size := variableBytes(spec)
			switch {
			case ps.Task < 0:
				ps.Task = st.choose(cfg.Strategy, size)
			case ps.Task < cfg.PSTasks: // pinned by the node itself
				st.add(ps.Task, size)
			}
			return ps.String()
		}
		return req.Merge(worker).String()
	}
}

// setterState is the strategy's state.
type setterState struct {
	mu    sync.Mutex
	next  int
	bytes []int64
}

// choose picks the task of a new variable of size bytes and records it.
func (s *setterState) choose(strategy Strategy, size int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := 0
	switch strategy {
	case GreedyBySize:
		for i, b := range s.bytes {
			if b < s.bytes[k] {
				k = i
			}
		}
	default:
		k = s.next
		s.next = (s.next + 1) % len(s.bytes)
	}
	s.bytes[k] += size
	return k
}

// add records a variable pinned to task k by its own request.
func (s *setterState) add(k int, size int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bytes[k] += size
}

// isRefInput reports whether input i of the node being built is a ref.
func isRefInput(spec *graph.NodeSpec, i int) bool {
	def, ok := op.Lookup(spec.Op)
	if !ok || len(def.Inputs) == 0 {
		return false
	}
	if i < len(def.Inputs) {
		return def.Inputs[i].Ref
	}
	return def.Inputs[len(def.Inputs)-1].Ref
}

// variableBytes is the size of the variable spec declares: its shape times
// its dtype's size (unknown dimensions count as 1).
func variableBytes(spec *graph.NodeSpec) int64 {
	dt, _ := spec.Attrs["dtype"].(tensor.DType)
	size := int64(1)
	if dt.Valid() {
		size = int64(dt.Size())
	}
	if sh, ok := spec.Attrs["shape"].(tensor.Shape); ok && sh.KnownRank() {
		for _, d := range sh.Dims() {
			if d > 0 {
				size *= int64(d)
			}
		}
	}
	return size
}
