package allreduce

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// An elastic ring runs its operations among the members of a View, a
// subset of its ranks that a leader (usually rank 0) chooses and sends to
// the others: when a rank is lost, the leader sends a view without it (a
// new generation), and the ring re-forms among the ranks left; when it
// comes back, a view with it. Every operation of a view is named with its
// generation, so that the operations of two generations never mix. Views
// travel over the ring's own transport, straight from the leader to each
// member. The leader is the view's first member; which rank leads is the
// caller's choice (the estimator: the lowest rank alive), and a rank takes
// the newest view whoever sent it.
//
//	leader: r.SendView(ctx, v); g := r.Among(v); g.AllReduceMean(...)
//	others: v, _ := r.NextView(ctx, last); g := r.Among(v); ...

// viewOp names the operations that carry views; viewFailedOp those that
// tell the members that an operation of a view failed (Round: the view's
// generation).
const (
	viewOp       = "\x00view"
	viewFailedOp = "\x00view failed"
)

// View is the membership of an elastic ring from a step on.
type View struct {
	// Gen is the view's generation, increasing with every view a leader
	// sends; a rank takes only a view newer than the last it took (a new
	// leader must choose one newer than its predecessor's).
	Gen int64
	// Step is the step at which the members start (or start again).
	Step int64
	// Members are the ranks of the ring, in ring order, the leader (the
	// sender) first.
	Members []int
	// Sync asks the members to agree on one state first (a member
	// joined, or a step failed on some ranks and not on others).
	Sync bool
	// Stop tells the members that training is over.
	Stop bool
	// RingOnly sends every operation of the view round the ring, even
	// on a ring with summation servers (one was found down). The route
	// of an operation is the view's: every member takes the same, and
	// it changes only with a new view, which the leader sends when it
	// finds the servers down, or answering again.
	RingOnly bool
}

// Has reports whether rank is a member of v.
func (v View) Has(rank int) bool { return slices.Contains(v.Members, rank) }

func (v View) encode() []float32 {
	flags := 0
	if v.Sync {
		flags |= 1
	}
	if v.Stop {
		flags |= 2
	}
	if v.RingOnly {
		flags |= 4
	}
	// float32 holds integers exactly up to 2^24: generations and steps
	// are sent in two halves.
	out := []float32{float32(v.Gen >> 24), float32(v.Gen & (1<<24 - 1)), float32(v.Step >> 24), float32(v.Step & (1<<24 - 1)), float32(flags)}
	for _, m := range v.Members {
		out = append(out, float32(m))
	}
	return out
}

func decodeView(d []float32) (View, error) {
	if len(d) < 5 {
		return View{}, fmt.Errorf("%w: a view of %d values", ErrMismatch, len(d))
	}
	v := View{Gen: int64(d[0])<<24 | int64(d[1]), Step: int64(d[2])<<24 | int64(d[3])}
	flags := int(d[4])
	v.Sync, v.Stop, v.RingOnly = flags&1 != 0, flags&2 != 0, flags&4 != 0
	for _, m := range d[5:] {
		if m < 0 || m != float32(math.Trunc(float64(m))) {
			return View{}, fmt.Errorf("%w: a view names rank %v", ErrMismatch, m)
		}
		v.Members = append(v.Members, int(m))
	}
	return v, nil
}

// views holds the newest view received and wakes those that wait for one,
// and the newest view that a member said it left.
type views struct {
	mu      sync.Mutex
	newest  *View
	changed chan struct{}

	left        *Departure
	leftChanged chan struct{}
}

// A Departure says that a member left a view: an operation of the view
// failed on it (or was given up), and it waits for the next view.
type Departure struct {
	// Gen is the view's generation; Rank is the member that left it.
	Gen  int64
	Rank int
}

// depart files d if its view is newer than that of the last departure.
func (vs *views) depart(d Departure) {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	if vs.left != nil && vs.left.Gen >= d.Gen {
		return
	}
	vs.left = &d
	if vs.leftChanged != nil {
		close(vs.leftChanged)
		vs.leftChanged = nil
	}
}

// departedAfter returns the last departure if its view is newer than gen,
// and otherwise a channel closed when one arrives.
func (vs *views) departedAfter(gen int64) (*Departure, <-chan struct{}) {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	if vs.left != nil && vs.left.Gen > gen {
		d := *vs.left
		return &d, nil
	}
	if vs.leftChanged == nil {
		vs.leftChanged = make(chan struct{})
	}
	return nil, vs.leftChanged
}

func (vs *views) put(v View) {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	if vs.newest != nil && vs.newest.Gen >= v.Gen {
		return
	}
	vs.newest = &v
	if vs.changed != nil {
		close(vs.changed)
		vs.changed = nil
	}
}

// after returns the newest view if it is newer than gen, and otherwise a
// channel closed when one arrives.
func (vs *views) after(gen int64) (*View, <-chan struct{}) {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	if vs.newest != nil && vs.newest.Gen > gen {
		v := *vs.newest
		return &v, nil
	}
	if vs.changed == nil {
		vs.changed = make(chan struct{})
	}
	return nil, vs.changed
}

// deliverView files a chunk that carries a view.
func (r *Ring) deliverView(c *Chunk) error {
	v, err := decodeView(c.Data)
	if err != nil {
		return err
	}
	if len(v.Members) == 0 || v.Members[0] != c.From {
		return fmt.Errorf("%w: rank %d: a view from rank %d that names %v (a view is sent by its first member)", ErrMismatch, r.rank, c.From, v.Members)
	}
	r.views.put(v)
	return nil
}

// SendView sends v to every member of v but this rank, which leads: it
// must be v's first member. It returns once every member has taken it, or
// with the errors of those that could not be reached (they may be lost:
// the operations of the view fail on them, and the leader sends another).
func (r *Ring) SendView(ctx context.Context, v View) error {
	if len(v.Members) == 0 {
		return fmt.Errorf("allreduce: view %d has no members", v.Gen)
	}
	return r.SendViewTo(ctx, v, v.Members[1:])
}

// SendViewTo sends v, which this rank leads (its first member), to the
// ranks to, members of v or not: a rank left out of a view learns from it
// that another rank leads (the estimator tells a lower rank that comes
// back, so that it takes the lead back at once).
func (r *Ring) SendViewTo(ctx context.Context, v View, to []int) error {
	if len(v.Members) == 0 || v.Members[0] != r.rank {
		return fmt.Errorf("allreduce: view %d: its sender, rank %d, must be its first member (got %v)", v.Gen, r.rank, v.Members)
	}
	data := v.encode()
	op := Op{Name: viewOp, Round: v.Gen}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		errs   []error
		missed []int
	)
	for _, m := range to {
		if m < 0 || m >= r.size {
			return fmt.Errorf("allreduce: view %d: rank %d outside the %d ranks", v.Gen, m, r.size)
		}
	}
	for _, m := range to {
		if m == r.rank {
			continue
		}
		wg.Go(func() {
			err := r.sendView(ctx, m, op, data)
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("allreduce: sending view %d to %s: %w", v.Gen, r.peer(m), err))
				missed = append(missed, m)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(missed) == 0 {
		return nil
	}
	slices.Sort(missed)
	return &ViewNotTakenError{Gen: v.Gen, Ranks: missed, Err: errors.Join(errs...)}
}

// ViewNotTakenError is SendView's error when some ranks did not take the
// view: they cannot take part in its operations, and the other members
// would wait for them until their deadline, so the leader leaves them out
// of its next view.
type ViewNotTakenError struct {
	Gen   int64
	Ranks []int // in increasing order
	Err   error // each rank's failure, joined
}

func (e *ViewNotTakenError) Error() string { return e.Err.Error() }
func (e *ViewNotTakenError) Unwrap() error { return e.Err }

func (r *Ring) sendView(ctx context.Context, to int, op Op, data []float32) error {
	st, err := r.tr.Open(ctx, to, op)
	if err != nil {
		return err
	}
	if err := st.Send(&Chunk{Op: op, From: r.rank, Size: r.size, Length: len(data), Data: data}); err != nil {
		st.Abort()
		return err
	}
	return st.Close()
}

// A view is all or nothing: once an operation of a view fails on a
// member, the member tells the others, and their operations of the view
// fail at once, those running and those yet to start. The member that
// failed waits for the next view (the leader makes one after any
// failure), so a member that had finished the operation, and went on to
// the next, would otherwise wait for it until its deadline: a summation
// server that died after it returned one member's sums and before the
// other's, or a member whose last chunk did not arrive.

// tellViewFailed tells the other members of tp's view that an operation
// of the view failed here (err), within noticeTimeout.
func (r *Ring) tellViewFailed(tp topology, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), noticeTimeout)
	defer cancel()
	r.tellLeft(ctx, tp.gen, tp.members)
	r.log.Debug("allreduce: told the members that an operation of the view failed", "rank", r.rank, "generation", tp.gen, "err", err)
}

// leaveRetry is how often a notice that this rank left a view is sent
// again to a member that did not take it.
const leaveRetry = 100 * time.Millisecond

// LeaveView tells every other member of v that this rank left v: an
// operation of v failed here or was given up, and this rank waits for the
// next view. Their operations of v fail at once (ErrViewFailed), and the
// leader learns of it (NextDeparture), rather than each waiting for this
// rank's chunks until its deadline. A member that does not take the
// notice (one that cannot be reached yet, a connection that is failing)
// is sent it again every leaveRetry until it does, ctx ends, or a view
// newer than v arrives here (the leader has moved on). It returns nil once
// every member took it or a newer view came, and otherwise the errors of
// those that did not take it.
func (r *Ring) LeaveView(ctx context.Context, v View) error {
	if !v.Has(r.rank) {
		return fmt.Errorf("allreduce: rank %d is not a member of view %d %v", r.rank, v.Gen, v.Members)
	}
	return r.tellLeft(ctx, v.Gen, v.Members)
}

// tellLeft sends the notice that this rank left view gen to each of
// members but this rank, as LeaveView says.
func (r *Ring) tellLeft(ctx context.Context, gen int64, members []int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	newer := r.ViewAfter(gen)
	op := Op{Name: viewFailedOp, Round: gen}
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		if m == r.rank {
			continue
		}
		wg.Go(func() {
			for {
				err := r.sendLeft(ctx, m, op, len(members))
				if err == nil || errors.Is(err, ErrClosed) {
					errs[i] = err
					return
				}
				select {
				case <-time.After(leaveRetry):
				case <-newer:
					return
				case <-ctx.Done():
					errs[i] = fmt.Errorf("allreduce: telling %s that rank %d left view %d: %w", r.peer(m), r.rank, gen, err)
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (r *Ring) sendLeft(ctx context.Context, to int, op Op, members int) error {
	st, err := r.tr.Open(ctx, to, op)
	if err != nil {
		return err
	}
	if err := st.Send(&Chunk{Op: op, From: r.rank, Size: members}); err != nil {
		st.Abort()
		return err
	}
	return st.Close()
}

// deliverViewFailed fails the operations of the view that c names: an
// operation of it failed on c's sender, a rank (a server fails only its
// own operations, and says so).
func (r *Ring) deliverViewFailed(c *Chunk) error {
	if c.From >= r.size || c.Op.Round < 0 {
		return fmt.Errorf("%w: rank %d: a notice that view %d failed from %s, which is not a rank", ErrMismatch, r.rank, c.Op.Round, r.peer(c.From))
	}
	if err := r.box.closedErr(); err != nil {
		return err
	}
	r.box.failView(c.Op.Round, &noticeError{fmt.Errorf("%w: rank %d: an operation of view %d failed on %s", ErrViewFailed, r.rank, c.Op.Round, r.peer(c.From))})
	r.views.depart(Departure{Gen: c.Op.Round, Rank: c.From})
	return nil
}

// NextDeparture waits for a member's notice that it left a view newer
// than generation gen (-1: any) and returns the newest such departure
// (only the first member to leave a view is reported). A leader cuts its
// operations of that view short and sends a new one at once.
func (r *Ring) NextDeparture(ctx context.Context, gen int64) (Departure, error) {
	for {
		d, changed := r.views.departedAfter(gen)
		if d != nil {
			return *d, nil
		}
		select {
		case <-changed:
		case <-r.box.closed:
			return Departure{}, ErrClosed
		case <-ctx.Done():
			return Departure{}, ctx.Err()
		}
	}
}

// NextView waits for a view newer than generation gen (-1: any) and
// returns the newest one received.
func (r *Ring) NextView(ctx context.Context, gen int64) (View, error) {
	for {
		v, changed := r.views.after(gen)
		if v != nil {
			return *v, nil
		}
		select {
		case <-changed:
		case <-r.box.closed:
			return View{}, ErrClosed
		case <-ctx.Done():
			return View{}, ctx.Err()
		}
	}
}

// NewestView returns the newest view received, if any.
func (r *Ring) NewestView() (View, bool) {
	v, _ := r.views.after(math.MinInt64)
	if v == nil {
		return View{}, false
	}
	return *v, true
}

// ViewAfter returns a channel closed once a view newer than gen has
// arrived (at once if it has): a member cancels an operation of an older
// view with it, since the leader has moved on.
func (r *Ring) ViewAfter(gen int64) <-chan struct{} {
	v, changed := r.views.after(gen)
	if v != nil {
		done := make(chan struct{})
		close(done)
		return done
	}
	return changed
}

// topology is the ring that an operation runs on: its members, in ring
// order, and this rank's position among them; and the route of its
// all-reduces.
type topology struct {
	members []int
	pos     int
	gen     int64 // the view's generation, -1 for every rank
	// servers: its all-reduces of float32 values in rounds of their own
	// go through the summation servers (the ring has some, and the view
	// does not send them round the ring).
	servers bool
}

func (t topology) size() int { return len(t.members) }

// full is the topology of every rank.
func (r *Ring) full() topology {
	members := make([]int, r.size)
	for i := range members {
		members[i] = i
	}
	return topology{members: members, pos: r.rank, gen: -1, servers: r.servers > 0}
}

// Group is the ring re-formed among the members of a view: it implements
// the operations of a Ring (train.AllReducer) over the members alone,
// with the view's generation in every operation's name. Rank and Size are
// this rank's position among the members and their number.
type Group struct {
	r    *Ring
	view View
	tp   topology
}

// Among returns the ring re-formed among v's members, of which this rank
// must be one.
func (r *Ring) Among(v View) (*Group, error) {
	pos := slices.Index(v.Members, r.rank)
	if pos < 0 {
		return nil, fmt.Errorf("allreduce: rank %d is not a member of view %d %v", r.rank, v.Gen, v.Members)
	}
	// The ring re-formed: chunks of the operations of older views that
	// have not started here never will be taken.
	r.box.expire(v.Gen)
	tp := topology{members: slices.Clone(v.Members), pos: pos, gen: v.Gen, servers: r.servers > 0 && !v.RingOnly}
	return &Group{r: r, view: v, tp: tp}, nil
}

// Rank returns this rank's position among the members.
func (g *Group) Rank() int { return g.tp.pos }

// Members returns the ranks of the members, in ring order.
func (g *Group) Members() []int { return slices.Clone(g.tp.members) }

// Size returns the number of members.
func (g *Group) Size() int { return g.tp.size() }

// AllReduce is Ring.AllReduce among the members.
func (g *Group) AllReduce(ctx context.Context, name string, round int64, data []float32) error {
	if err := g.r.box.closedErr(); err != nil {
		return err
	}
	if g.tp.size() == 1 {
		return ctx.Err()
	}
	return g.r.allReduce(ctx, g.op(name, round), data, g.tp, mode{})
}

// op keys the group's operation name: operations of different views
// never mix.
func (g *Group) op(name string, round int64) Op {
	return Op{Name: name + genSuffix + strconv.FormatInt(g.view.Gen, 10), Round: round}
}

// genSuffix precedes the generation of a group's operation's view in its
// name.
const genSuffix = "/gen"

// opGen returns the generation of the view whose group runs op (the
// operation through the servers of one too: "grads/gen7@servers"), -1 for
// an operation of the whole ring.
func opGen(op Op) int64 {
	i := strings.LastIndex(op.Name, genSuffix)
	if i < 0 {
		return -1
	}
	digits, _ := strings.CutSuffix(op.Name[i+len(genSuffix):], serversSuffix)
	g, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || g < 0 {
		return -1
	}
	return g
}

// AllReduceMean is AllReduce divided by the number of members.
func (g *Group) AllReduceMean(ctx context.Context, name string, round int64, data []float32) error {
	if err := g.AllReduce(ctx, name, round, data); err != nil {
		return err
	}
	inv := 1 / float32(g.tp.size())
	for i := range data {
		data[i] *= inv
	}
	return nil
}

// Broadcast replaces data on every member by that of the member at
// position root (0: the leader).
func (g *Group) Broadcast(ctx context.Context, name string, round int64, root int, data []float32) error {
	if root < 0 || root >= g.tp.size() {
		return fmt.Errorf("allreduce: broadcast %q: root %d outside the %d members", name, root, g.tp.size())
	}
	if g.tp.pos != root {
		clear(data)
	}
	return g.AllReduce(ctx, name, round, data)
}
