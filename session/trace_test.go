package session_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/device/sim"
	"github.com/distflow/distflow/device/taskgraph"
	"github.com/distflow/distflow/grad"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rpc"
	"github.com/distflow/distflow/server"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/trace"
)

// traceOut keeps the trace of TestTraceSyncStepOnCluster, to open it in
// Perfetto: go test ./session -run TestTraceSyncStepOnCluster -trace-out /tmp/sync.json
var traceOut = flag.String("trace-out", "", "also write the traced sync step's Chrome trace to this file")

// syncModel builds one synchronous step of in-graph replication over
// /job:ps/task:0 and two workers: each worker's tower computes the
// gradients of its batch for the shared W and b, which live on the ps; the
// ps averages them and applies one update.
func syncModel(t testing.TB) (g *graph.Graph, init *graph.Node, feeds map[graph.Output]*tensor.Tensor, train *graph.Node) {
	t.Helper()
	s := graph.NewScope()
	ps := s.WithDevice("/job:ps/task:0")
	w := ops.NewVariable(ps, "W", tensor.Float32, []int{8, 1}, ops.ZerosInit())
	b := ops.NewVariable(ps, "b", tensor.Float32, []int{1}, ops.ZerosInit())
	feeds = map[graph.Output]*tensor.Tensor{}
	var gw, gb []graph.Output
	for i := range 2 {
		ws := s.WithDevice(fmt.Sprintf("/job:worker/task:%d", i)).NameScope(fmt.Sprintf("tower%d", i))
		x := ops.Placeholder(ws, "x", tensor.Float32, tensor.MakeShape(4, 8))
		y := ops.Placeholder(ws, "y", tensor.Float32, tensor.MakeShape(4, 1))
		pred := ops.Add(ws, ops.MatMul(ws, x, w.Value(), false, false), b.Value())
		loss := ops.Mean(ws, ops.Square(ws, ops.Sub(ws, pred, y)), nil, false)
		grads, err := grad.Gradients(ws, []graph.Output{loss}, []graph.Output{w.Value(), b.Value()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		gw, gb = append(gw, grads[0]), append(gb, grads[1])
		xv, yv := tensor.New(tensor.Float32, 4, 8), tensor.New(tensor.Float32, 4, 1)
		for k := range xv.Float32s() {
			xv.Float32s()[k] = float32(k%7) / 7
		}
		for k := range yv.Float32s() {
			yv.Float32s()[k] = float32(k + i)
		}
		feeds[x], feeds[y] = xv, yv
	}
	half := ops.Scalar(ps, tensor.Float32, 0.5)
	lr := ops.Scalar(ps, tensor.Float32, 0.01)
	train = ops.Group(ps, "train",
		ops.ApplyGradientDescent(ps, w.Value(), lr, ops.Mul(ps, ops.AddN(ps, gw...), half)),
		ops.ApplyGradientDescent(ps, b.Value(), lr, ops.Mul(ps, ops.AddN(ps, gb...), half)))
	init = ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return s.Graph(), init, feeds, train
}

// startCluster starts a server per task of jobs on loopback listeners and
// returns them by task name.
func startCluster(t testing.TB, jobs map[string]int) map[string]*server.Server {
	t.Helper()
	addrs := map[string][]string{}
	lis := map[cluster.TaskID]net.Listener{}
	for job, n := range jobs {
		for i := range n {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addrs[job] = append(addrs[job], l.Addr().String())
			lis[cluster.TaskID{Job: job, Index: i}] = l
		}
	}
	spec, err := cluster.NewSpec(addrs)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*server.Server{}
	for id, l := range lis {
		s, err := server.New(server.Config{Cluster: spec, Task: id, Listener: l, RPC: rpc.Options{}, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		out[id.String()] = s
	}
	return out
}

// event is a trace event as a reader of the file sees it.
type event struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat"`
	Ph   string         `json:"ph"`
	Ts   *float64       `json:"ts"`
	Dur  *float64       `json:"dur"`
	Pid  *int           `json:"pid"`
	Tid  *int           `json:"tid"`
	Args map[string]any `json:"args"`
}

// TestTraceSyncStepOnCluster traces a synchronous step of two workers on a
// real loopback cluster (ps + 2 workers, gRPC and the tensor channel) and
// checks the file a reader gets: valid Chrome trace JSON, every task's
// kernels, every Send paired with its Recv by rendezvous key with equal
// bytes, and the RPCs.
func TestTraceSyncStepOnCluster(t *testing.T) {
	servers := startCluster(t, map[string]int{"ps": 1, "worker": 2})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, init, feeds, train := syncModel(t)
	sess, err := session.Open(ctx, servers["/job:worker/task:0"].Target(), g)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Run(ctx, feeds, nil, []*graph.Node{train}); err != nil { // registers the partitions
		t.Fatal(err)
	}
	var b trace.Builder
	for range 2 {
		_, st, err := sess.RunTraced(ctx, feeds, nil, []*graph.Node{train})
		if err != nil {
			t.Fatal(err)
		}
		b.Add(st)
	}
	path := filepath.Join(t.TempDir(), trace.FileName(3))
	if *traceOut != "" {
		path = *traceOut
	}
	if err := trace.WriteFile(path, b.File()); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := trace.Validate(data); err != nil {
		t.Fatal(err)
	}
	var f struct {
		TraceEvents []event `json:"traceEvents"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}

	procs := map[int]string{}
	threads := map[[2]int]bool{}
	for _, e := range f.TraceEvents {
		if e.Name == "" || e.Ph == "" || e.Pid == nil || e.Tid == nil {
			t.Fatalf("event without name, ph, pid or tid: %+v", e)
		}
		switch e.Name {
		case "process_name":
			procs[*e.Pid] = e.Args["name"].(string)
		case "thread_name":
			threads[[2]int{*e.Pid, *e.Tid}] = true
		}
	}
	kernels := map[string]map[string]int{} // ops per task
	type end struct {
		task  string
		bytes float64
	}
	sends, recvs := map[string][]end{}, map[string][]end{} // by step and key
	rpcs := map[string]int{}
	for _, e := range f.TraceEvents {
		if e.Ph != "X" {
			continue
		}
		if e.Ts == nil || e.Dur == nil || *e.Dur < 0 {
			t.Fatalf("complete event %s without ts or with a negative dur", e.Name)
		}
		task, ok := procs[*e.Pid]
		if !ok || !threads[[2]int{*e.Pid, *e.Tid}] {
			t.Fatalf("event %s on an unnamed pid %d or tid %d", e.Name, *e.Pid, *e.Tid)
		}
		switch e.Cat {
		case trace.CatKernel:
			op := e.Args["op"].(string)
			if op == "MatMul" && e.Args["shapes"] != "[4,1]" && e.Args["shapes"] != "[8,1]" {
				t.Errorf("MatMul %s: shapes %v, want [4,1] (the forward product) or [8,1] (W's gradient)", e.Name, e.Args["shapes"])
			}
			if kernels[task] == nil {
				kernels[task] = map[string]int{}
			}
			kernels[task][op]++
			key := fmt.Sprint(e.Args["step_id"], " ", e.Args["rendezvous_key"])
			bytes, _ := e.Args["bytes"].(float64)
			switch op {
			case "Send":
				sends[key] = append(sends[key], end{task, bytes})
			case "Recv":
				recvs[key] = append(recvs[key], end{task, bytes})
			}
		case trace.CatRPC:
			rpcs[e.Name]++
			if b, _ := e.Args["received_bytes"].(float64); b <= 0 && e.Name == "RecvTensor" {
				t.Errorf("RecvTensor from %v received %v bytes", e.Args["peer"], e.Args["received_bytes"])
			}
		}
	}
	for _, task := range []string{"/job:ps/task:0", "/job:worker/task:0", "/job:worker/task:1"} {
		if !slices.Contains(mapsValues(procs), task) {
			t.Errorf("no process for %s (processes %v)", task, procs)
		}
		if kernels[task]["Send"] == 0 || kernels[task]["Recv"] == 0 {
			t.Errorf("%s: kernels %v, want Sends and Recvs", task, kernels[task])
		}
	}
	for _, task := range []string{"/job:worker/task:0", "/job:worker/task:1"} {
		if kernels[task]["MatMul"] == 0 {
			t.Errorf("%s ran no MatMul: %v", task, kernels[task])
		}
	}
	if kernels["/job:ps/task:0"]["ApplyGradientDescent"] != 4 { // 2 variables, 2 steps
		t.Errorf("ps kernels %v, want 4 ApplyGradientDescent", kernels["/job:ps/task:0"])
	}
	if len(sends) == 0 {
		t.Fatal("no Send in the trace")
	}
	for key, s := range sends {
		r := recvs[key]
		if len(s) != 1 || len(r) != 1 {
			t.Errorf("key %s: %d Sends and %d Recvs, want one each", key, len(s), len(r))
			continue
		}
		if s[0].bytes != r[0].bytes || s[0].bytes <= 0 || s[0].task == r[0].task {
			t.Errorf("key %s: Send on %s of %v bytes, Recv on %s of %v bytes", key, s[0].task, s[0].bytes, r[0].task, r[0].bytes)
		}
	}
	for key := range recvs {
		if _, ok := sends[key]; !ok {
			t.Errorf("key %s: a Recv without its Send", key)
		}
	}
	// The master (on worker 0) calls RunGraph on each task, every step.
	if rpcs["RunGraph"] != 6 || rpcs["RecvTensor"] == 0 {
		t.Errorf("RPC events %v, want 6 RunGraph and some RecvTensor", rpcs)
	}
	t.Logf("%d events, %d Send/Recv pairs, kernels per task %v", len(f.TraceEvents), len(sends), kernels)
}

func mapsValues(m map[int]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// TestTraceNextRunTracesTheNextStepOnly arms a local session: the next Run
// with the armed context is traced and handed over; one with another
// context before it, and the one after it, are not.
func TestTraceNextRunTracesTheNextStepOnly(t *testing.T) {
	sess, x, y, loss, train := linearRegression(t)
	ctx := context.Background()
	feeds := map[graph.Output]*tensor.Tensor{x: tensor.MustFromSlice([]float32{0.5}, 1, 1), y: tensor.MustFromSlice([]float32{11}, 1, 1)}
	var got []*pb.StepStats
	// A Run with another context does not take the request.
	other, cancel := context.WithCancel(ctx)
	defer cancel()
	if _, err := sess.Run(other, feeds, []graph.Output{loss}, []*graph.Node{train}); err != nil {
		t.Fatal(err)
	}
	sess.TraceNextRun(ctx, func(st *pb.StepStats, err error) {
		if err != nil {
			t.Error(err)
		}
		got = append(got, st)
	})
	for _, c := range []context.Context{other, ctx, ctx} {
		if _, err := sess.Run(c, feeds, []graph.Output{loss}, []*graph.Node{train}); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 1 {
		t.Fatalf("%d timelines handed over, want 1", len(got))
	}
	tasks := map[string]int{}
	for _, ts := range got[0].GetTasks() {
		tasks[ts.GetTask()] = len(ts.GetSpans())
	}
	if tasks[session.LocalTask] < 5 || tasks[session.ClientTask] != 1 {
		t.Errorf("spans per task %v, want the local kernels and the client's step", tasks)
	}
	var b trace.Builder
	b.Add(got[0])
	data, err := json.Marshal(b.File())
	if err != nil {
		t.Fatal(err)
	}
	if err := trace.Validate(data); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkTraceSyncStep runs the synchronous step of two workers on a
// loopback cluster untraced ("off": the run path's cost of tracing is a
// few branches) and traced ("on": every task records its kernels, the
// timelines travel back with RunGraph and RunStep, and are aligned).
func BenchmarkTraceSyncStep(b *testing.B) {
	servers := startCluster(b, map[string]int{"ps": 1, "worker": 2})
	ctx := context.Background()
	g, init, feeds, train := syncModel(b)
	sess, err := session.Open(ctx, servers["/job:worker/task:0"].Target(), g)
	if err != nil {
		b.Fatal(err)
	}
	defer sess.Close()
	if _, err := sess.Run(ctx, nil, nil, []*graph.Node{init}); err != nil {
		b.Fatal(err)
	}
	targets := []*graph.Node{train}
	b.Run("off", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := sess.Run(ctx, feeds, nil, targets); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("on", func(b *testing.B) {
		b.ReportAllocs()
		spans := 0
		for b.Loop() {
			_, st, err := sess.RunTraced(ctx, feeds, nil, targets)
			if err != nil {
				b.Fatal(err)
			}
			for _, ts := range st.GetTasks() {
				spans += len(ts.GetSpans())
			}
		}
		b.ReportMetric(float64(spans)/float64(b.N), "spans/step")
	})
}

// TestTraceOverDevices: a traced step of a session over a GPU records its
// host's part: the ops that ran on the CPU and the Recvs that waited for
// the GPU's values (its kernels are not traced yet); it recorded nothing.
func TestTraceOverDevices(t *testing.T) {
	s := graph.NewScope()
	gpu := s.WithDevice("/gpu:0")
	x := ops.Placeholder(gpu, "x", tensor.Float32, tensor.MakeShape(2, 2))
	y := ops.Sqrt(gpu, ops.MatMul(gpu, x, x, false, false)) // Sqrt has no GPU kernel: the CPU's
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	devs, err := sim.New(sim.Config{Cards: 1, CardBytes: 64 << 20}).Open(device.Options{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer devs[0].Close()
	sess, err := session.New(s.Graph(), session.WithDevices(taskgraph.Config{Devices: devs, SoftPlacement: true,
		Logger: slog.New(slog.DiscardHandler)}))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	feeds := map[graph.Output]*tensor.Tensor{x: tensor.MustFromSlice([]float32{2, 2, 2, 2}, 2, 2)}
	out, st, err := sess.RunTraced(context.Background(), feeds, []graph.Output{y}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := out[0].Float32s(); !slices.Equal(got, []float32{2.828427, 2.828427, 2.828427, 2.828427}) {
		t.Errorf("sqrt(x·x) of twos = %v", got)
	}
	spanOps := map[string]bool{}
	for _, task := range st.GetTasks() {
		if task.GetTask() == session.LocalTask {
			for _, sp := range task.GetSpans() {
				spanOps[sp.GetOp()] = true
			}
		}
	}
	if !spanOps["Sqrt"] || !spanOps["Recv"] {
		t.Errorf("the traced step's host spans have ops %v, want Sqrt and a Recv from the GPU", spanOps)
	}
}
