package estimator

import (
	"context"
	"fmt"
	"os"

	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// Examples returns the training examples ts (rows along dimension 0, as
// data.FromTensors slices them) for this replica, endlessly, in batches of
// batch.
//
// With parameter servers (and in a single process), the examples are
// sharded dynamically: every epoch is one permutation of the rows from
// Seed and the epoch number, and the replicas claim the next batch of it
// from a cursor on a ps with a fetch-and-add carried by the training step
// itself (no extra round trip). So whoever is away, comes back or is
// replaced, no example is read twice or skipped within an epoch, except
// what a failure loses: a replica killed before its step is applied takes
// with it the batch it was training and the one it had claimed for its
// next step (2 batches at most); a ps restored from a checkpoint rewinds
// the cursor with the model, and the batch each replica holds is then read
// again later. The cursor is saved in checkpoints with the model. In
// synchronous training a step claims once its round is over: every
// replica's first batch is claimed before any second one, so round k of n
// replicas trains the batches k*n to k*n+n-1, whatever the replicas'
// timing, and another run with the same seed repeats it (bit for bit with
// two replicas, whose sums do not depend on the order the gradients
// arrive in); a killed replica takes only the batch it was training.
//
// With all-reduce and averaging, the same permutations are read without
// communication: at each step the members of the ring's current view
// read consecutive batches from a position p (member r of w reads
// p+r*batch; the next step starts at p+w*batch), which rank 0 gives with
// its model whenever the ring re-forms and saves in its checkpoints. A
// step cut short by a failure is read again by the members left.
//
// With in-graph replication, the one client that reads for every tower
// claims a batch per tower with each step, the same way: tower i reads
// the i-th. So a restarted chief resumes the epoch where its checkpoint
// left it.
func (ic InputContext) Examples(batch int, ts ...*tensor.Tensor) (*data.Dataset, error) {
	if batch <= 0 {
		return nil, fmt.Errorf("estimator: InputContext.Examples: batch %d is not positive", batch)
	}
	if ic.claims != nil {
		ic.claims.block = int64(batch)
		ds, err := data.Claimed(ic.claims.forTower(ic.tower), batch, ic.Seed, ts...)
		if err != nil {
			return nil, err
		}
		return ds.Batch(batch, true), nil // no prefetch: each claim is a batch taken from the others
	}
	ds, err := data.FromTensors(ts...)
	if err != nil {
		return nil, err
	}
	ds = ds.Shuffle(ts[0].Shape()[0], ic.Seed)
	if ic.NumReplicas > 1 {
		ds = ds.Shard(ic.NumReplicas, ic.ReplicaIndex)
	}
	return ds.Repeat(-1).Batch(batch, true).Prefetch(2), nil
}

// claimer hands out the blocks of a replica's dynamically sharded input
// (InputContext.Examples): the first from a step of its own, the others
// from the cursor's value fetched with each training step. It is used by
// the training loop's goroutine only.
type claimer struct {
	// block is the batch size; 0: the input does not claim.
	block int64
	// towers is how many towers read one block each per step (in-graph
	// replication; 1 otherwise): tower i reads the i-th of a claim.
	towers int64
	// op adds block to the cursor and returns its new value, fetched with
	// each step (in a synchronous step, once its round is over); first
	// does the same in a step of its own, for a replica's first claim.
	op, first graph.Output
	// run claims a block in a step of its own; nil until the session is
	// ready (the batch read before, to learn the input's shapes, is not
	// trained: it claims nothing).
	run func(ctx context.Context) (int64, error)
	// next is a block claimed by the last step, if has.
	next int64
	has  bool
	// current is the first block being trained (tower 0's).
	current int64
	// trained, when set, gets a line per block trained (a test hook:
	// $DISTFLOW_TRAINED_BLOCKS names the file).
	trained *os.File
	who     string
}

// envTrainedBlocks names a file to which each replica appends "task start
// size" for every block it trained, and on a ring " step generation": a
// test hook.
const envTrainedBlocks = "DISTFLOW_TRAINED_BLOCKS"

func (c *claimer) claim(ctx context.Context) (int64, error) {
	switch {
	case c.has:
		c.has, c.current = false, c.next
	case c.run == nil:
		return 0, nil
	default:
		p, err := c.run(ctx)
		if err != nil {
			return 0, fmt.Errorf("estimator: claiming the next %d examples: %w", c.block, err)
		}
		c.current = p
	}
	return c.current, nil
}

// forTower is the claim function of tower i: tower 0 claims the step's
// blocks, the others read theirs from its claim (the loop reads the
// towers in order, one block each per step).
func (c *claimer) forTower(i int) data.ClaimFunc {
	if i == 0 {
		return c.claim
	}
	return func(context.Context) (int64, error) { return c.current + int64(i)*c.block, nil }
}

// span is how far one claim moves the cursor: a block per tower.
func (c *claimer) span() int64 { return c.block * max(c.towers, 1) }

// build adds the cursor, beside the global step, and the claim, which
// runs after the node after when it is set (the end of a synchronous
// round: so that each round's claims follow the last round's, and every
// round trains the same batches in every run).
func (c *claimer) build(s *graph.Scope, globalStep *ops.Variable, after *graph.Node) {
	s = graph.NewScopeWithGraph(s.Graph()).WithDevice(globalStep.Node().Device())
	cursor := ops.NewVariable(s.SubScope("input"), "cursor", tensor.Int64, nil, ops.ZerosInit(), ops.NotTrainable())
	span := ops.Scalar(s, tensor.Int64, float64(c.span()))
	c.first = ops.AssignAdd(s, cursor.Value(), span)
	c.op = c.first
	if after != nil {
		c.op = ops.AssignAdd(s.WithControlDependencies(after), cursor.Value(), span)
	}
}

// stepped records the claim fetched with a step that succeeded (the new
// cursor: the blocks claimed end there) and logs the blocks trained.
func (c *claimer) stepped(cursor *tensor.Tensor) {
	c.logTrained("")
	c.next, c.has = int64(cursor.Float64At(0))-c.span(), true
}

// logTrained records the current blocks as trained (the test hook),
// each line ending with lineage: on a ring, " step generation", the step
// and the view it was trained in (a step trained again in a newer view
// replaces the older one's, whose model was given up).
func (c *claimer) logTrained(lineage string) {
	if c.trained == nil {
		return
	}
	for i := range max(c.towers, 1) {
		fmt.Fprintf(c.trained, "%s %d %d%s\n", c.who, c.current+i*c.block, c.block, lineage)
	}
}

// inputPosition is the collective strategies' input position as a
// variable of rank 0's model, so that checkpoints save and restore it.
type inputPosition struct {
	v   *ops.Variable
	in  graph.Output
	set *graph.Node
}

func newInputPosition(s *graph.Scope) *inputPosition {
	v := ops.NewVariable(s.SubScope("input"), "cursor", tensor.Int64, nil, ops.ZerosInit(), ops.NotTrainable())
	in := ops.Placeholder(s, "input_position", tensor.Int64, tensor.MakeShape())
	return &inputPosition{v: v, in: in, set: ops.Assign(s, v.Value(), in).Node}
}

func (p *inputPosition) write(ctx context.Context, sess *session.Session, pos int64) error {
	t := tensor.New(tensor.Int64)
	t.SetFloat64At(0, float64(pos))
	if _, err := sess.Run(ctx, map[graph.Output]*tensor.Tensor{p.in: t}, nil, []*graph.Node{p.set}); err != nil {
		return fmt.Errorf("estimator: recording the input position: %w", err)
	}
	return nil
}

func (p *inputPosition) read(ctx context.Context, sess *session.Session) (int64, error) {
	out, err := sess.Run(ctx, nil, []graph.Output{p.v.Value()}, nil)
	if err != nil {
		return 0, fmt.Errorf("estimator: reading the input position: %w", err)
	}
	return int64(out[0].Float64At(0)), nil
}

// openTrainedLog opens the test hook's file, if asked for.
func (c *claimer) openTrainedLog(who string) error {
	path := os.Getenv(envTrainedBlocks)
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("estimator: $%s: %w", envTrainedBlocks, err)
	}
	c.trained, c.who = f, who
	return nil
}
