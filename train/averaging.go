package train

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// AllReducer is what the all-reduce trainers need of the workers' ring:
// *allreduce.Ring implements it. Every worker calls the same operations
// with the same names, rounds and sizes, and all end with identical values.
type AllReducer interface {
	// AllReduceMean replaces data by its element-wise mean over the ranks.
	AllReduceMean(ctx context.Context, name string, round int64, data []float32) error
	// Broadcast replaces data by rank root's.
	Broadcast(ctx context.Context, name string, round int64, root int, data []float32) error
	// Rank and Size are this worker's rank and the number of workers.
	Rank() int
	Size() int
}

// Runner runs steps of a graph: *session.Session implements it.
type Runner interface {
	Run(ctx context.Context, feeds map[graph.Output]*tensor.Tensor, fetches []graph.Output, targets []*graph.Node) ([]*tensor.Tensor, error)
}

// ErrNotFloat32 is returned when a variable that should travel over the
// ring is not float32.
var ErrNotFloat32 = errors.New("train: all-reduce needs float32 variables")

// allreduceFlat moves a list of same-shaped float32 tensors to and from one
// flat buffer: the variables (or their gradients) of a model, so that one
// ring operation per step carries them all.
type allreduceFlat struct {
	names  []string
	shapes [][]int
	sizes  []int
	total  int
}

func allreduceNewFlat(vars []*ops.Variable) (*allreduceFlat, error) {
	f := &allreduceFlat{}
	for _, v := range vars {
		if v.DType() != tensor.Float32 {
			return nil, fmt.Errorf("%w: variable %v", ErrNotFloat32, v)
		}
		shape := v.Shape()
		if !shape.FullyDefined() {
			return nil, fmt.Errorf("train: all-reduce: variable %v has no static shape", v)
		}
		f.names = append(f.names, v.Name())
		f.shapes = append(f.shapes, shape.Dims())
		f.sizes = append(f.sizes, shape.NumElements())
		f.total += shape.NumElements()
	}
	return f, nil
}

// pack copies ts into buf (grown to f.total plus extra elements).
func (f *allreduceFlat) pack(buf []float32, ts []*tensor.Tensor, extra int) ([]float32, error) {
	buf = buf[:0]
	for i, t := range ts {
		d := t.Float32s()
		if d == nil || len(d) != f.sizes[i] {
			return nil, fmt.Errorf("train: all-reduce: value of %s is %v%v, want float32%v", f.names[i], t.DType(), t.Shape(), f.shapes[i])
		}
		buf = append(buf, d...)
	}
	for range extra {
		buf = append(buf, 0)
	}
	return buf, nil
}

// unpack returns tensors viewing copies of buf's first f.total elements.
func (f *allreduceFlat) unpack(buf []float32) []*tensor.Tensor {
	ts := make([]*tensor.Tensor, len(f.sizes))
	off := 0
	for i, n := range f.sizes {
		t := tensor.New(tensor.Float32, f.shapes[i]...)
		copy(t.Float32s(), buf[off:off+n])
		ts[i] = t
		off += n
	}
	return ts
}

// allreduceAssigner reads a model's variables and overwrites them with
// values fed through placeholders.
type allreduceAssigner struct {
	flat   *allreduceFlat
	values []graph.Output
	feeds  []graph.Output
	assign *graph.Node
}

func allreduceNewAssigner(s *graph.Scope, vars []*ops.Variable) (*allreduceAssigner, error) {
	flat, err := allreduceNewFlat(vars)
	if err != nil {
		return nil, err
	}
	a := &allreduceAssigner{flat: flat}
	var assigns []*graph.Node
	for i, v := range vars {
		vs := s.WithDevice(v.Node().Device())
		ph := ops.Placeholder(vs, fmt.Sprintf("value_%d", i), tensor.Float32, tensor.MakeShape(flat.shapes[i]...))
		as := ops.Assign(vs, v.Value(), ph)
		a.values = append(a.values, v.Value())
		a.feeds = append(a.feeds, ph)
		assigns = append(assigns, as.Node)
	}
	a.assign = ops.Group(s, "assign", assigns...)
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("train: all-reduce: building variable assignments: %w", err)
	}
	return a, nil
}

func (a *allreduceAssigner) read(ctx context.Context, sess Runner, buf []float32, extra int) ([]float32, error) {
	vals, err := sess.Run(ctx, nil, a.values, nil)
	if err != nil {
		return nil, fmt.Errorf("train: reading the variables to average: %w", err)
	}
	return a.flat.pack(buf, vals, extra)
}

func (a *allreduceAssigner) write(ctx context.Context, sess Runner, buf []float32) error {
	feeds := make(map[graph.Output]*tensor.Tensor, len(a.feeds))
	for i, t := range a.flat.unpack(buf) {
		feeds[a.feeds[i]] = t
	}
	if _, err := sess.Run(ctx, feeds, nil, []*graph.Node{a.assign}); err != nil {
		return fmt.Errorf("train: assigning the averaged variables: %w", err)
	}
	return nil
}

// broadcast gives every worker rank 0's variable values.
func (a *allreduceAssigner) broadcast(ctx context.Context, sess Runner, ring AllReducer, name string, round int64) error {
	buf, err := a.read(ctx, sess, nil, 0)
	if err != nil {
		return err
	}
	if err := ring.Broadcast(ctx, name, round, 0, buf); err != nil {
		return fmt.Errorf("train: broadcasting the variables from rank 0: %w", err)
	}
	return a.write(ctx, sess, buf)
}

// AllReduceTrainer trains a model whose variables are local to each worker
// (no parameter server): each step computes the local gradients, averages
// them over the workers' ring, and applies the average with the optimizer,
// so that workers that start equal stay equal. Dense gradients are summed
// round the ring (AllReduceMean); sparse ones (GradVar.Sparse: embedding
// lookups) are all-gathered and applied with the optimizer's sparse update,
// so that only the rows some rank looked up move (allreduce_sparse.go).
//
// Build it, then ops.GlobalVariablesInitializer, in every worker's graph;
// after initialising, call Broadcast once so that all workers start from
// rank 0's values. A trainer is used by one goroutine at a time.
type AllReduceTrainer struct {
	loss      graph.Output
	grads     []graph.Output // the dense gradients
	gradFeeds []graph.Output
	apply     *graph.Node
	flat      *allreduceFlat
	sparse    *allreduceSparse // nil: no sparse gradient
	vars      *allreduceAssigner
	buf       []float32
}

// NewAllReduceTrainer adds to s's graph the gradients of loss with respect
// to vars (the trainable variables if nil; all must be float32 with static
// shapes), placeholders through which the averaged gradients are fed back,
// and opt's update from them. The update increments the graph's global step
// if it has one.
func NewAllReduceTrainer(s *graph.Scope, opt Optimizer, loss graph.Output, vars []*ops.Variable) (*AllReduceTrainer, error) {
	if err := s.Err(); err != nil {
		return nil, err
	}
	gvs, err := opt.ComputeGradients(s, loss, vars)
	if err != nil {
		return nil, err
	}
	used := make([]*ops.Variable, len(gvs))
	var dense []*ops.Variable
	for i, gv := range gvs {
		used[i] = gv.Var
		if gv.Sparse == nil {
			dense = append(dense, gv.Var)
		}
	}
	flat, err := allreduceNewFlat(dense)
	if err != nil {
		return nil, err
	}
	t := &AllReduceTrainer{loss: loss, flat: flat}
	as := s.SubScope("allreduce")
	fed := make([]GradVar, len(gvs))
	for i, gv := range gvs {
		vs := as.WithDevice(gv.Var.Node().Device())
		if gv.Sparse != nil {
			sv, g, err := allreduceNewSparseVar(vs, i, gv)
			if err != nil {
				return nil, err
			}
			if t.sparse == nil {
				t.sparse = &allreduceSparse{}
			}
			t.sparse.vars = append(t.sparse.vars, sv)
			fed[i] = g
			continue
		}
		ph := ops.Placeholder(vs, fmt.Sprintf("grad_%d", i), tensor.Float32, tensor.MakeShape(flat.shapes[len(t.grads)]...))
		t.grads = append(t.grads, gv.Grad)
		t.gradFeeds = append(t.gradFeeds, ph)
		fed[i] = GradVar{Grad: ph, Var: gv.Var}
	}
	if t.apply, err = opt.ApplyGradients(as, fed, GlobalStep(s.Graph())); err != nil {
		return nil, err
	}
	if t.vars, err = allreduceNewAssigner(as.SubScope("broadcast"), used); err != nil {
		return nil, err
	}
	return t, nil
}

// Broadcast overwrites every worker's variables with rank 0's (all workers
// call it, after initialising their variables). round must differ from the
// rounds given to Step.
func (t *AllReduceTrainer) Broadcast(ctx context.Context, sess Runner, ring AllReducer, round int64) error {
	return t.vars.broadcast(ctx, sess, ring, "broadcast", round)
}

// Step runs one synchronous training step: it computes the loss and the
// gradients of the batch in feeds, replaces the gradients by their mean over
// the ring (operation "grads", round: every worker passes the same round,
// a new one each step; with sparse gradients, the all-gathers
// "grads/sparse_counts" and "grads/sparse" of the same round too), and
// applies them. It returns this worker's loss.
func (t *AllReduceTrainer) Step(ctx context.Context, sess Runner, feeds map[graph.Output]*tensor.Tensor, ring AllReducer, round int64) (loss float64, err error) {
	loss, _, err = t.StepFetching(ctx, sess, feeds, nil, ring, round)
	return loss, err
}

// StepFetching is Step that also fetches extra (a hook's tensors, the
// summaries) with the gradients, from the model before the update, and
// returns their values.
func (t *AllReduceTrainer) StepFetching(ctx context.Context, sess Runner, feeds map[graph.Output]*tensor.Tensor, extra []graph.Output, ring AllReducer, round int64) (loss float64, values []*tensor.Tensor, err error) {
	fetches := append([]graph.Output{t.loss}, t.grads...)
	if t.sparse != nil {
		fetches = append(fetches, t.sparse.fetches()...)
	}
	nGrads := len(fetches) - 1
	vals, err := sess.Run(ctx, feeds, append(fetches, extra...), nil)
	if err != nil {
		return 0, nil, fmt.Errorf("train: all-reduce step %d: computing gradients: %w", round, err)
	}
	loss, values = vals[0].Float64At(0), vals[1+nGrads:]
	applyFeeds := make(map[graph.Output]*tensor.Tensor, nGrads)
	if len(t.grads) > 0 {
		if t.buf, err = t.flat.pack(t.buf, vals[1:1+len(t.grads)], 0); err != nil {
			return loss, nil, err
		}
		if err := ring.AllReduceMean(ctx, "grads", round, t.buf); err != nil {
			return loss, nil, fmt.Errorf("train: all-reduce step %d: %w", round, err)
		}
		for i, g := range t.flat.unpack(t.buf) {
			applyFeeds[t.gradFeeds[i]] = g
		}
	}
	if t.sparse != nil {
		if err := t.sparse.mean(ctx, ring, round, vals[1+len(t.grads):1+nGrads], applyFeeds); err != nil {
			return loss, nil, err
		}
	}
	if _, err := sess.Run(ctx, applyFeeds, nil, []*graph.Node{t.apply}); err != nil {
		return loss, nil, fmt.Errorf("train: all-reduce step %d: applying the averaged gradients: %w", round, err)
	}
	return loss, values, nil
}

// AveragingConfig configures a PeriodicAverager.
type AveragingConfig struct {
	// Tau is the number of local steps between averages; 0 chooses it
	// adaptively.
	Tau int
	// Tau0 is the adaptive period before the first measurement (0: 4).
	Tau0 int
	// MinTau and MaxTau bound the adaptive period (0: 1 and 64).
	MinTau, MaxTau int
	// CommFraction is the share of wall time that the adaptive period aims
	// to give communication (0: 0.1).
	CommFraction float64
	// Logger receives the changes of the adaptive period (nil:
	// slog.Default()).
	Logger *slog.Logger
}

func (c AveragingConfig) withDefaults() (AveragingConfig, error) {
	if c.Tau < 0 || c.Tau0 < 0 || c.MinTau < 0 || c.MaxTau < 0 {
		return c, fmt.Errorf("train: averaging: negative period in %+v", c)
	}
	if c.CommFraction < 0 || c.CommFraction >= 1 {
		return c, fmt.Errorf("train: averaging: communication fraction %g outside [0, 1)", c.CommFraction)
	}
	if c.MinTau == 0 {
		c.MinTau = 1
	}
	if c.MaxTau == 0 {
		c.MaxTau = 64
	}
	if c.MinTau > c.MaxTau {
		return c, fmt.Errorf("train: averaging: period bounds [%d, %d] are empty", c.MinTau, c.MaxTau)
	}
	if c.Tau0 == 0 {
		c.Tau0 = 4
	}
	c.Tau0 = min(max(c.Tau0, c.MinTau), c.MaxTau)
	if c.CommFraction == 0 {
		c.CommFraction = 0.1
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// PeriodicAverager implements model averaging: each worker trains its own
// copy of the variables and, every tau local steps, replaces them by their
// mean over the ring.
//
// With an adaptive period, tau is chosen after every average so that
// communication takes about CommFraction of the wall time: with c the time
// of an averaging round and t the time of a local step, tau = c(1-f)/(f t),
// bounded to [MinTau, MaxTau]. The measurements travel with the variables
// and are averaged too, so that every worker computes the same tau: the
// workers never disagree on when to average.
//
// Every worker must call Step after each of its local steps (the same number
// of times) and may call Average at the end. It is used by one goroutine at
// a time.
type PeriodicAverager struct {
	cfg   AveragingConfig
	vars  *allreduceAssigner
	tau   int
	since int   // local steps since the last average
	round int64 // averages done
	buf   []float32

	last     time.Time     // end of the previous Step
	stepSum  time.Duration // measured local time since the last average
	stepN    int
	lastComm time.Duration // duration of the previous average
}

// NewPeriodicAverager adds to s's graph the assignments that averaging
// needs for vars (the trainable variables if nil; float32, static shapes).
func NewPeriodicAverager(s *graph.Scope, vars []*ops.Variable, cfg AveragingConfig) (*PeriodicAverager, error) {
	if err := s.Err(); err != nil {
		return nil, err
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if vars == nil {
		vars = ops.TrainableVariables(s.Graph())
	}
	if len(vars) == 0 {
		return nil, fmt.Errorf("train: averaging: no variables to average")
	}
	a := &PeriodicAverager{cfg: cfg, tau: cfg.Tau}
	if a.tau == 0 {
		a.tau = cfg.Tau0
	}
	if a.vars, err = allreduceNewAssigner(s.SubScope("averaging"), vars); err != nil {
		return nil, err
	}
	return a, nil
}

// Restart starts the averaging schedule afresh: the first period and no
// local step since the last average. The members of a re-formed ring
// (a worker joined, or left) call it at the same point, after taking
// rank 0's variables, so that they agree again on when to average.
func (a *PeriodicAverager) Restart() {
	a.tau, a.since, a.round = a.cfg.Tau, 0, 0
	if a.tau == 0 {
		a.tau = a.cfg.Tau0
	}
	a.stepSum, a.stepN, a.lastComm, a.last = 0, 0, 0, time.Now()
}

// Tau returns the current period, in local steps.
func (a *PeriodicAverager) Tau() int { return a.tau }

// Rounds returns the number of averages done.
func (a *PeriodicAverager) Rounds() int64 { return a.round }

// Broadcast overwrites every worker's variables with rank 0's (after
// initialisation, so that all workers start equal).
func (a *PeriodicAverager) Broadcast(ctx context.Context, sess Runner, ring AllReducer) error {
	err := a.vars.broadcast(ctx, sess, ring, "averaging/broadcast", 0)
	a.last = time.Now()
	return err
}

// Step records one local step, taken since the previous call, and averages
// the variables when tau steps have passed. It reports whether it averaged.
func (a *PeriodicAverager) Step(ctx context.Context, sess Runner, ring AllReducer) (averaged bool, err error) {
	now := time.Now()
	if !a.last.IsZero() {
		a.stepSum += now.Sub(a.last)
		a.stepN++
	}
	a.since++
	if a.since < a.tau {
		a.last = now
		return false, nil
	}
	if err := a.Average(ctx, sess, ring); err != nil {
		return false, err
	}
	return true, nil
}

// Average replaces the variables by their mean over the ring now (every
// worker calls it at the same point: at the end of training, so that all
// end with the same model), and chooses the next period if it is adaptive.
func (a *PeriodicAverager) Average(ctx context.Context, sess Runner, ring AllReducer) error {
	start := time.Now()
	buf, err := a.vars.read(ctx, sess, a.buf, 2)
	if err != nil {
		return err
	}
	a.buf = buf
	n := len(buf)
	var step time.Duration
	if a.stepN > 0 {
		step = a.stepSum / time.Duration(a.stepN)
	}
	buf[n-2] = float32(step.Seconds())
	buf[n-1] = float32(a.lastComm.Seconds())
	a.round++
	if err := ring.AllReduceMean(ctx, "averaging", a.round, buf); err != nil {
		return fmt.Errorf("train: averaging round %d: %w", a.round, err)
	}
	if err := a.vars.write(ctx, sess, buf[:n-2]); err != nil {
		return err
	}
	meanStep, meanComm := float64(buf[n-2]), float64(buf[n-1])
	a.lastComm = time.Since(start)
	a.since, a.stepSum, a.stepN = 0, 0, 0
	a.last = time.Now()
	if a.cfg.Tau == 0 && meanStep > 0 && meanComm > 0 {
		a.adapt(meanStep, meanComm)
	}
	return nil
}

// adapt sets tau from the workers' mean step and communication times.
func (a *PeriodicAverager) adapt(step, comm float64) {
	tau := allreduceAdaptiveTau(step, comm, a.cfg.CommFraction, a.cfg.MinTau, a.cfg.MaxTau)
	if tau != a.tau {
		a.cfg.Logger.Info("train: averaging period changed", "round", a.round, "from", a.tau, "to", tau,
			"step", time.Duration(step*float64(time.Second)), "comm", time.Duration(comm*float64(time.Second)))
		a.tau = tau
	}
}

// allreduceAdaptiveTau is the smallest period that keeps communication
// (comm seconds per average, step seconds per local step) within the
// fraction f of wall time: comm/(comm + tau*step) <= f, bounded to
// [minTau, maxTau].
func allreduceAdaptiveTau(step, comm, f float64, minTau, maxTau int) int {
	if step <= 0 {
		return maxTau
	}
	want := math.Ceil(comm * (1 - f) / (f * step))
	if want >= float64(maxTau) {
		return maxTau
	}
	return max(int(want), minTau)
}
