package ringstate

import (
	"fmt"
	"slices"
	"time"

	"github.com/distflow/distflow/allreduce"
)

// Config is what a Machine knows of its ring and of training.
type Config struct {
	// Rank is this rank, Ranks the ring's size (0 <= Rank < Ranks).
	Rank, Ranks int
	// Steps is the target step: training ends once it is trained.
	Steps int64
	// LostAfter is the heartbeats' lost deadline: after a failed step
	// whose cause is unknown, the leader waits twice as long at most for
	// the heartbeats to tell who is lost.
	LostAfter time.Duration
	// WaitTimeout bounds a follower's wait for a view (zero: no bound).
	WaitTimeout time.Duration
	// Servers: the ring has summation servers, whose answer (ProbeServers)
	// sets the route of each view after the first.
	Servers bool
	// ServerRetry is how often a leader whose view goes round the ring
	// asks whether the servers answer again (default 5 s).
	ServerRetry time.Duration
	// MaxMismatches bounds the views in a row whose same step fails
	// because the ranks' data do not match (default 3).
	MaxMismatches int
}

func (c Config) validate() error {
	switch {
	case c.Ranks < 1 || c.Rank < 0 || c.Rank >= c.Ranks:
		return fmt.Errorf("ringstate: rank %d of %d ranks", c.Rank, c.Ranks)
	case c.Steps < 0:
		return fmt.Errorf("ringstate: a target of %d steps", c.Steps)
	case c.LostAfter <= 0:
		return fmt.Errorf("ringstate: a lost deadline of %v", c.LostAfter)
	}
	return nil
}

// phase is what the machine waits for.
type phase int

const (
	idle phase = iota
	followCheck
	followWait
	followSync
	followStep
	followFinish
	leadCheck
	leadProbe
	leadSend
	leadSync
	leadStep
	leadWait
	leadFinish
	leadStop
	ended
)

// checkFor and probeFor say where the leader goes on once answered.
const (
	atTop = iota
	afterSync
	afterStep
)

const (
	retryRoute = iota // the view goes round the ring: do the servers answer again?
	newRoute          // the route of the next view
)

// Machine is one rank's view of the ring's membership and leadership. It
// is not safe for concurrent use: the shell steps it from one goroutine,
// or under a lock.
type Machine struct {
	cfg Config
	now time.Time
	out []Action
	ph  phase

	// What the heartbeats say: lost ranks; ranks a failed step found down
	// (left out of the leader's views until they answer since).
	lost     map[int]bool
	excluded map[int]bool
	answered map[int]bool // an excluded rank answered since
	// changed: a heartbeat changed a rank's state since the leader last
	// waited for one.
	changed bool
	// closed: no view can come any more.
	closed bool

	newest   *allreduce.View // the newest view received
	done     int64           // the steps this rank trained, restored or took
	lastSent int64           // the newest generation this rank sent

	mismatchAt int64
	mismatches int

	// view is the view this rank made (leading) or took (following);
	// gen, following, the generation of the last view taken (-1: none).
	view allreduce.View
	gen  int64
	cut  bool // Cut was emitted for the operation in flight

	// leading
	seen     int64 // the newest generation received when this rank took the lead
	fresh    bool  // the next step needs a new view
	joined   bool  // a view was joined (the last average is due at the end)
	ringOnly bool
	probed   time.Time
	told     map[int]int64 // lower ranks sent a view, and which
	want     []int         // the members of the view being made
	checkFor int
	probeFor int
	deadline time.Time
	failure  Failure // the failure being handled
	// leftGen is the leader's view that a member said it left (0: none);
	// leaves counts, by rank, the views each member left since the last
	// step trained.
	leftGen int64
	leaves  map[int]int
}

// New returns a machine for cfg; it starts with a Start event.
func New(cfg Config) (*Machine, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.ServerRetry == 0 {
		cfg.ServerRetry = 5 * time.Second
	}
	if cfg.MaxMismatches == 0 {
		cfg.MaxMismatches = 3
	}
	return &Machine{cfg: cfg, lost: map[int]bool{}, excluded: map[int]bool{}, answered: map[int]bool{}, gen: -1}, nil
}

// Step feeds the machine ev, which happened at now (time is an input:
// the machine never reads a clock), and returns the actions it asks for,
// in order. The caller owns the returned slice.
func (m *Machine) Step(now time.Time, ev Event) []Action {
	if now.After(m.now) {
		m.now = now
	}
	m.out = nil
	if m.ph == ended {
		return nil
	}
	switch e := ev.(type) {
	case Start:
		if m.ph == idle {
			m.done = e.Done
			if m.leading() {
				m.lead()
			} else {
				m.follow(-1)
			}
		}
	case PeerLost:
		m.peer(e.Rank, true)
	case PeerAlive:
		m.peer(e.Rank, false)
	case Answered:
		if m.excluded[e.Rank] {
			m.answered[e.Rank] = true
		}
	case ViewReceived:
		m.received(e.View)
	case ViewSent:
		m.sent(e)
	case MemberLeft:
		m.memberLeft(e.Gen, e.Rank)
	case Ended:
		m.ended(e.Yes)
	case MarkerSeen:
		if m.ph == followWait {
			m.end(End{Reason: Away})
		}
	case ServersProbed:
		m.probedServers(e.Down)
	case Synced:
		m.synced(e.Done)
	case SyncFailed:
		m.syncFailed(e.Failure)
	case Trained:
		m.trained(e.Step, e.Stop)
	case StepFailed:
		m.stepFailed(e.Step, e.Failure)
	case Finished:
		m.finished(e.Failed)
	case Tick:
		m.tick()
	case ViewsClosed:
		m.closed = true
		if m.ph == followWait {
			m.end(End{Reason: Closed})
		}
	}
	return m.out
}

// Leading reports whether this rank leads the ring now.
func (m *Machine) Leading() bool { return m.ph >= leadCheck && m.ph <= leadStop }

// Done returns the count of steps this rank has trained, restored or
// taken from the member furthest on.
func (m *Machine) Done() int64 { return m.done }

// View returns the view this rank made (leading) or last joined.
func (m *Machine) View() allreduce.View { return m.view }

// Steps returns the target step: the configured one, or the step at
// which a hook asked to stop.
func (m *Machine) Steps() int64 { return m.cfg.Steps }

// Ended reports whether the machine has ended.
func (m *Machine) Ended() bool { return m.ph == ended }

// Lost reports whether the heartbeats count rank lost.
func (m *Machine) Lost(rank int) bool { return m.lost[rank] }

func (m *Machine) emit(a ...Action) { m.out = append(m.out, a...) }

// leading reports whether every rank below this one is lost.
func (m *Machine) leading() bool {
	for i := range m.cfg.Rank {
		if !m.lost[i] {
			return false
		}
	}
	return true
}

func (m *Machine) newestGen() int64 {
	if m.newest == nil {
		return 0
	}
	return m.newest.Gen
}

// foreign reports whether a view newer than gen was received.
func (m *Machine) foreign(gen int64) bool { return m.newest != nil && m.newest.Gen > gen }

// nextGen is the generation of a new view: newer than any this rank sent,
// took or received (the members take only newer views), and at least the
// clock's milliseconds, so that a restarted rank, which remembers none,
// still makes newer views than its predecessor's.
func (m *Machine) nextGen() int64 {
	last := max(m.seen, m.view.Gen, m.newestGen(), m.lastSent)
	g := max(last+1, m.now.UnixMilli())
	m.lastSent = g
	return g
}

func (m *Machine) end(e End) {
	m.emit(e)
	m.ph = ended
}

// disagree counts a failure of step; it ends the machine once the ranks'
// data did not match in MaxMismatches views in a row at that step.
func (m *Machine) disagree(f Failure, step int64) bool {
	if !f.Mismatch {
		m.mismatches = 0
		return false
	}
	if step != m.mismatchAt {
		m.mismatchAt, m.mismatches = step, 0
	}
	if m.mismatches++; m.mismatches < m.cfg.MaxMismatches {
		return false
	}
	m.end(End{Reason: ByMismatch, Step: step, Mismatches: m.mismatches})
	return true
}

// peer records a heartbeat's change of state.
func (m *Machine) peer(rank int, lost bool) {
	if rank < 0 || rank >= m.cfg.Ranks || rank == m.cfg.Rank {
		return
	}
	m.lost[rank] = lost
	m.changed = true
	if !lost {
		if m.excluded[rank] {
			m.answered[rank] = true // a heartbeat answered
		}
	}
	switch m.ph {
	case leadSync, leadStep:
		if lost {
			m.cutShort() // the step would wait for it until its deadline
		}
	case leadWait:
		m.changed = false
		m.top()
	case followWait:
		if m.leading() {
			m.lead()
		}
	case followSync, followStep:
		if m.leading() {
			m.cutShort()
		}
	}
}

// received files a view from another rank.
func (m *Machine) received(v allreduce.View) {
	if len(v.Members) == 0 || v.Members[0] == m.cfg.Rank || (m.newest != nil && v.Gen <= m.newest.Gen) {
		return
	}
	m.newest = &v
	switch m.ph {
	case leadSync, leadStep:
		if v.Gen > m.view.Gen {
			m.cutShort() // another rank sent a view: answer it at once
		}
	case leadWait:
		if v.Gen > m.view.Gen {
			m.top()
		}
	case followWait:
		if v.Gen > m.gen {
			m.take(v)
		}
	case followSync, followStep:
		if v.Gen > m.view.Gen {
			m.cutShort()
		}
	}
}

// cutShort cuts the operation in flight, once. A member's step before
// the step at which a view ends training is not cut: the last steps
// finish (a step past it is: the leader's hooks ended training before).
func (m *Machine) cutShort() {
	if m.cut {
		return
	}
	if m.ph == followStep && m.newest != nil && m.newest.Stop && m.done+1 < m.newest.Step {
		return
	}
	m.cut = true
	m.emit(Cut{})
}

// cutIfStale cuts the sync or step just started if what would cut it in
// flight has happened already: a view newer than this one arrived (the
// leader answers even a higher rank's with a newer view of its own), or,
// following, this rank should lead.
func (m *Machine) cutIfStale() {
	if m.foreign(m.view.Gen) || (!m.Leading() && m.leading()) {
		m.cutShort()
	}
}

func (m *Machine) tick() {
	if m.deadline.IsZero() || m.now.Before(m.deadline) {
		return
	}
	switch m.ph {
	case followWait:
		m.end(End{Reason: WaitExpired})
	case leadWait:
		m.top()
	}
}

func (m *Machine) wakeAt(d time.Duration) {
	m.deadline = m.now.Add(d)
	m.emit(WakeAt{At: m.deadline})
}

// ---- following

// follow makes this rank a follower; leader is the lower rank that took
// the lead back (-1 at the start).
func (m *Machine) follow(leader int) {
	m.emit(Follow{Leader: leader})
	m.gen = -1
	m.followTop()
}

// followTop waits for the next view: newer than the last taken.
func (m *Machine) followTop() {
	if m.leading() {
		m.lead()
		return
	}
	m.ph = followCheck
	m.emit(CheckEnded{})
}

func (m *Machine) followWaitView() {
	m.ph = followWait
	if m.newest != nil && m.newest.Gen > m.gen {
		m.take(*m.newest)
		return
	}
	if m.closed {
		m.end(End{Reason: Closed})
		return
	}
	if m.cfg.WaitTimeout > 0 {
		m.wakeAt(m.cfg.WaitTimeout)
	}
}

// take takes view v, newer than the last taken.
func (m *Machine) take(v allreduce.View) {
	m.gen, m.deadline = v.Gen, time.Time{}
	if v.Stop {
		m.end(End{Reason: Done})
		return
	}
	if !v.Has(m.cfg.Rank) {
		m.followTop() // left out: wait to be let back in
		return
	}
	m.view, m.cut = v, false
	m.emit(Join{View: v})
	if v.Sync {
		m.ph = followSync
		m.emit(Sync{})
		m.cutIfStale()
		return
	}
	m.done = v.Step - 1
	m.followTrain()
}

func (m *Machine) followTrain() {
	if m.done >= m.cfg.Steps {
		m.followTop() // the view that ends training comes next
		return
	}
	m.ph, m.cut = followStep, false
	m.emit(Train{Step: m.done + 1})
	m.cutIfStale()
}

// ---- leading

// lead makes this rank the leader: every lower rank is lost.
func (m *Machine) lead() {
	m.emit(Lead{})
	m.seen = m.newestGen()
	m.view = allreduce.View{}
	m.fresh, m.joined, m.ringOnly, m.probed = true, false, false, time.Time{}
	m.told = map[int]int64{}
	m.leaves = map[int]int{}
	m.deadline = time.Time{}
	m.top()
}

// top is the top of the leader's loop: a view, then a step. A view that a
// member left is not trained in again, even if the leader's own operation
// succeeded: that member waits for the next view.
func (m *Machine) top() {
	m.deadline = time.Time{}
	if m.leftView() {
		m.fresh = true
	}
	if m.done >= m.cfg.Steps {
		m.finale()
		return
	}
	if m.fresh {
		m.check(atTop)
		return
	}
	m.topChecked()
}

func (m *Machine) check(purpose int) {
	if m.done >= m.cfg.Steps { // ended here, not elsewhere
		m.checked(purpose, false)
		return
	}
	m.ph, m.checkFor = leadCheck, purpose
	m.emit(CheckEnded{Final: m.cfg.Rank == 0})
}

func (m *Machine) ended(yes bool) {
	switch m.ph {
	case followCheck:
		if yes {
			m.end(End{Reason: Away})
			return
		}
		m.followWaitView()
	case leadCheck:
		m.checked(m.checkFor, yes)
	}
}

// checked goes on once the leader knows whether training ended elsewhere.
func (m *Machine) checked(purpose int, yes bool) {
	if yes {
		// Another rank ended training while this one was away: rank 0
		// took the final checkpoint (it keeps and evaluates the model);
		// any other rank must not train on alone.
		if m.cfg.Rank != 0 {
			m.end(End{Reason: Away})
			return
		}
		m.done, m.joined = m.cfg.Steps, false
		m.finale()
		return
	}
	switch purpose {
	case atTop:
		m.topChecked()
	case afterSync:
		if m.disagree(m.failure, m.done+1) {
			return
		}
		if m.foreign(m.view.Gen) {
			m.top()
			return
		}
		m.failed(m.failure)
	case afterStep:
		m.failed(m.failure)
	}
}

func (m *Machine) topChecked() {
	if m.foreign(max(m.seen, m.view.Gen)) && m.newest.Members[0] < m.cfg.Rank {
		// A lower rank leads again: it is alive, whatever the heartbeats
		// have seen yet.
		leader := m.newest.Members[0]
		m.lost[leader] = false
		m.follow(leader)
		return
	}
	if m.view.RingOnly && !m.fresh && m.now.Sub(m.probed) >= m.cfg.ServerRetry {
		m.probed = m.now
		m.ph, m.probeFor = leadProbe, retryRoute
		m.emit(ProbeServers{})
		return
	}
	m.reform()
}

func (m *Machine) probedServers(down bool) {
	if m.ph != leadProbe {
		return
	}
	switch m.probeFor {
	case retryRoute:
		if !down {
			m.fresh = true // the servers answer again: a view that goes through them
		}
		m.reform()
	case newRoute:
		m.ringOnly, m.probed = down, m.now
		m.send()
	}
}

// reform makes a new view if the members changed or one is due, and
// trains the next step otherwise.
func (m *Machine) reform() {
	want := m.members()
	if !m.fresh && slices.Equal(want, m.view.Members) {
		m.train()
		return
	}
	m.want = want
	if m.cfg.Servers && len(m.view.Members) > 0 {
		// Not at the first view: servers still starting are waited for
		// by the operations, not taken for down.
		m.ph, m.probeFor = leadProbe, newRoute
		m.emit(ProbeServers{})
		return
	}
	m.send()
}

// members are this rank first, then every rank the heartbeats see alive
// (lower ones too: a rank back from a pause may not count the ranks below
// it lost again yet; it leads until one of them sends a newer view), but
// those a failed step found down until they answer again.
func (m *Machine) members() []int {
	out := []int{m.cfg.Rank}
	for i := range m.cfg.Ranks {
		if i == m.cfg.Rank || m.lost[i] {
			continue
		}
		if m.excluded[i] {
			if !m.answered[i] {
				continue
			}
			delete(m.excluded, i)
			delete(m.answered, i)
			m.emit(Readmit{Rank: i})
		}
		out = append(out, i)
	}
	return out
}

func (m *Machine) send() {
	m.view = allreduce.View{Gen: m.nextGen(), Step: m.done + 1, Members: m.want, Sync: true, RingOnly: m.ringOnly}
	m.ph = leadSend
	m.emit(SendView{View: m.view, To: slices.Clone(m.view.Members[1:]), Wait: true})
}

func (m *Machine) sent(e ViewSent) {
	switch {
	case m.ph == leadSend && e.Gen == m.view.Gen:
		var missing []int
		for _, r := range e.Missing {
			if r != m.cfg.Rank && m.view.Has(r) && !slices.Contains(missing, r) {
				missing = append(missing, r)
			}
		}
		if len(missing) > 0 {
			// The members that took the view would wait for these in its
			// operations until their deadline: a view without them.
			m.exclude(missing, NotTaken)
			m.top()
			return
		}
		if (e.Failed && !slices.Equal(m.members(), m.want)) || m.leftView() {
			// The heartbeats have seen more meanwhile, or a member has
			// left the view already: a new view.
			m.top()
			return
		}
		m.joined, m.cut = true, false
		m.emit(Join{View: m.view})
		m.tellLower()
		m.ph = leadSync
		m.emit(Sync{})
		m.cutIfStale()
	case m.ph == leadStop && e.Gen == m.view.Gen:
		m.end(End{Reason: Done, Led: true})
	}
}

// tellLower sends the view to each lower rank that the heartbeats see
// alive and that was not sent it yet: back, it learns that another rank
// leads and takes the lead back at once (two leaders would otherwise
// train apart until a step of theirs failed).
func (m *Machine) tellLower() {
	var to []int
	for j := range m.cfg.Rank {
		switch {
		case m.lost[j]:
			delete(m.told, j) // tell it again when it is back
		case m.told[j] != m.view.Gen:
			m.told[j] = m.view.Gen
			to = append(to, j)
		}
	}
	if len(to) > 0 {
		m.emit(SendView{View: m.view, To: to})
	}
}

func (m *Machine) synced(done int64) {
	switch m.ph {
	case followSync:
		m.done = done
		m.followTrain()
	case leadSync:
		m.done = done
		if m.leftView() {
			m.top()
			return
		}
		m.fresh = false
		m.train()
	}
}

func (m *Machine) syncFailed(f Failure) {
	switch m.ph {
	case followSync:
		if m.disagree(f, m.done+1) {
			return
		}
		m.leave(f)
		m.followTop()
	case leadSync:
		m.failure = f
		m.check(afterSync)
	}
}

func (m *Machine) train() {
	m.tellLower()
	m.ph, m.cut = leadStep, false
	m.emit(Train{Step: m.done + 1})
	m.cutIfStale()
}

// leave tells the other members of the follower's view that this rank
// left it after failure f: they would otherwise wait for its part of the
// view's operations until their deadline. Not when they were told
// already (a notice, a mismatch: whoever found the cause told them), nor
// when a newer
// view came (the leader has moved on), nor when this rank is to lead (its
// own view follows at once).
func (m *Machine) leave(f Failure) {
	if f.Notice || f.Mismatch || m.closed || m.foreign(m.view.Gen) || m.leading() {
		return
	}
	m.emit(Leave{View: m.view})
}

// memberLeft handles a member's word that it left view gen: the leader
// cuts short the view's sync or step, which would wait for that member's
// part until the deadline, and sends a new view at once.
func (m *Machine) memberLeft(gen int64, rank int) {
	if !m.Leading() || m.view.Stop || gen != m.view.Gen || rank == m.cfg.Rank || !m.view.Has(rank) || m.leftGen == gen {
		return
	}
	m.leftGen = gen
	m.leaves[rank]++
	switch m.ph {
	case leadSync, leadStep:
		m.cutShort()
	case leadWait:
		m.top()
	}
	// leadSend: the view is not joined once sent (see sent).
}

// leftView reports whether a member left the leader's view.
func (m *Machine) leftView() bool { return m.leftGen != 0 && m.leftGen == m.view.Gen }

// exclude leaves ranks out of the next views until they answer a
// heartbeat again.
func (m *Machine) exclude(ranks []int, cause ExcludeCause) {
	for _, d := range ranks {
		m.excluded[d] = true
		delete(m.answered, d)
	}
	m.emit(Exclude{Ranks: slices.Clone(ranks), Cause: cause})
}

func (m *Machine) trained(step int64, stop bool) {
	stop = stop && step < m.cfg.Steps
	switch {
	case m.ph == followStep && step == m.done+1:
		m.done++
		if stop {
			// Training ends where the leader's hooks say; this rank's
			// leave it, and the ring re-forms without it.
			m.cfg.Steps = m.done
			m.end(End{Reason: Stopped})
			return
		}
		if m.done == m.cfg.Steps {
			m.ph = followFinish
			m.emit(Finish{})
			return
		}
		m.followTrain()
	case m.ph == leadStep && step == m.done+1:
		m.done++
		clear(m.leaves)
		if stop {
			m.cfg.Steps = m.done // a hook asked to stop: training ends here
		}
		m.emit(Checkpoint{Step: m.done})
		m.top()
	}
}

func (m *Machine) stepFailed(step int64, f Failure) {
	if (m.ph != followStep && m.ph != leadStep) || step != m.done+1 {
		return
	}
	if f.Fatal {
		m.end(End{Reason: ByFatal})
		return
	}
	if m.disagree(f, step) {
		return
	}
	if m.ph == followStep {
		m.leave(f)
		m.followTop()
		return
	}
	m.fresh = true // some members may have applied the step and others not
	if m.foreign(m.view.Gen) {
		m.top() // another rank sent a view: answer it at once
		return
	}
	m.failure = f
	m.check(afterStep)
}

// failed handles a failure of the leader's sync or step: the ranks it
// found down are left out at once; a failure a member told of, or one of
// the summation servers, needs no wait; otherwise the leader waits, twice
// the lost deadline at most, for the heartbeats to tell who is lost.
func (m *Machine) failed(f Failure) {
	left := m.leftView()
	switch {
	case f.PeerDown:
		m.exclude(f.Down, FoundDown)
		m.top()
	case left:
		// A member left the view: it is alive and waits for the next.
		// One that left two views in a row at this step is left out
		// until it answers a heartbeat again, rather than making views
		// as fast as it leaves them.
		var again []int
		for r, n := range m.leaves {
			if n >= 2 && !m.excluded[r] {
				again = append(again, r)
			}
		}
		if len(again) > 0 {
			slices.Sort(again)
			m.exclude(again, LeftAgain)
		}
		m.top()
	case f.Notice:
		m.top()
	case m.changed:
		m.changed = false
		m.top()
	default:
		m.ph = leadWait
		m.wakeAt(2 * m.cfg.LostAfter)
	}
}

// finale ends the leader's training: the last average among the members
// of its view, then the view that tells every rank that training is over.
func (m *Machine) finale() {
	if m.joined {
		m.ph = leadFinish
		m.emit(Finish{})
		return
	}
	m.stop()
}

func (m *Machine) finished(failed bool) {
	switch m.ph {
	case followFinish:
		m.followTop()
	case leadFinish:
		if failed {
			m.end(End{Reason: ByFatal})
			return
		}
		m.stop()
	}
}

func (m *Machine) stop() {
	all := []int{m.cfg.Rank}
	for i := range m.cfg.Ranks {
		if i != m.cfg.Rank {
			all = append(all, i)
		}
	}
	// Every rank waits for a view, members and those left out: this one
	// ends their training.
	m.view = allreduce.View{Gen: m.nextGen(), Step: m.done + 1, Members: all, Stop: true}
	m.ph = leadStop
	m.emit(SendView{View: m.view, To: all[1:], Wait: true})
}
