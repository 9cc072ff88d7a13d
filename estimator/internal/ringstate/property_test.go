package ringstate

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/distflow/distflow/allreduce"
)

// sim runs a ring of machines against a random world: heartbeats that
// count ranks lost and alive at random, one rank of another, views
// delivered late or never, operations that succeed or fail at random,
// and time that passes. It checks the machines' promises after every
// step.
type sim struct {
	t   *testing.T
	rng *rand.Rand
	ms  []*Machine
	now time.Time
	// msgs are the views sent and not yet delivered.
	msgs []msg
	// op is what each machine waits for: "", "sent", "sync", "step",
	// "finish"; opGen the view sent, cut whether the op was cut short.
	op    []string
	opGen []int64
	cut   []bool
	wake  []time.Time
	// sent and got: the newest generation each machine sent and received.
	sent, got []int64
	// senders maps each generation sent to its sender.
	senders map[int64]int
	marker  bool // a leader ended training: the end-of-training marker
	trace   []string
}

// msg is a view, or a member's word that it left a view (left).
type msg struct {
	to   int
	view allreduce.View
	left *MemberLeft
}

func newSim(t *testing.T, seed uint64, ranks int, steps int64) *sim {
	s := &sim{t: t, rng: rand.New(rand.NewPCG(seed, 1)), now: time.UnixMilli(1000), senders: map[int64]int{}}
	for i := range ranks {
		m, err := New(Config{Rank: i, Ranks: ranks, Steps: steps, LostAfter: time.Second, Servers: i%2 == 1})
		if err != nil {
			t.Fatal(err)
		}
		s.ms = append(s.ms, m)
	}
	s.op, s.opGen, s.cut = make([]string, ranks), make([]int64, ranks), make([]bool, ranks)
	s.wake, s.sent, s.got = make([]time.Time, ranks), make([]int64, ranks), make([]int64, ranks)
	return s
}

func (s *sim) fail(format string, args ...any) {
	s.t.Helper()
	tail := s.trace[max(0, len(s.trace)-60):]
	s.t.Fatalf("%s\nthe last events:\n%s", fmt.Sprintf(format, args...), fmt.Sprint(slices.Concat([]string{}, tail)))
}

// step feeds machine i ev and carries out its actions, answering its
// questions at once, and checks its promises.
func (s *sim) step(i int, ev Event) {
	s.t.Helper()
	s.now = s.now.Add(time.Millisecond) // every event at a time of its own
	if v, ok := ev.(ViewReceived); ok && v.View.Gen > s.got[i] {
		s.got[i] = v.View.Gen
	}
	if _, ok := ev.(Tick); ok && !s.wake[i].IsZero() && !s.now.Before(s.wake[i]) {
		s.wake[i] = time.Time{} // due: a machine asks again if it still waits
	}
	leadingBefore := s.ms[i].Leading()
	mustCut := false
	if e, ok := ev.(MemberLeft); ok {
		m := s.ms[i]
		// A leader whose view a member left does not wait for it.
		mustCut = m.Leading() && e.Gen == m.View().Gen && m.View().Has(e.Rank) && (s.op[i] == "sync" || s.op[i] == "step") && !s.cut[i]
	}
	acts := s.ms[i].Step(s.now, ev)
	if mustCut && !slices.ContainsFunc(acts, func(a Action) bool { _, ok := a.(Cut); return ok }) {
		s.fail("rank %d leads view %d, which rank %d left, and does not cut its %s short", i, s.ms[i].View().Gen, ev.(MemberLeft).Rank, s.op[i])
	}
	s.trace = append(s.trace, fmt.Sprintf("\n%d@%d %v -> %v", i, s.now.UnixMilli(), ev, acts))
	var answers []Event
	for _, a := range acts {
		switch a := a.(type) {
		case Lead:
			for j := range i {
				if !s.ms[i].Lost(j) {
					s.fail("rank %d leads while its heartbeats see rank %d alive", i, j)
				}
			}
		case Follow:
			if a.Leader >= i {
				s.fail("rank %d follows rank %d, not a lower rank", i, a.Leader)
			}
		case SendView:
			s.sendView(i, a)
		case Leave:
			if !a.View.Has(i) {
				s.fail("rank %d leaves view %s, of which it is not a member", i, FormatView(a.View))
			}
			for _, to := range a.View.Members {
				if to != i {
					s.msgs = append(s.msgs, msg{to: to, left: &MemberLeft{Gen: a.View.Gen, Rank: i}})
				}
			}
		case CheckEnded:
			answers = append(answers, Ended{Yes: s.marker && s.rng.IntN(2) == 0})
		case ProbeServers:
			answers = append(answers, ServersProbed{Down: s.rng.IntN(3) == 0})
		case Sync:
			s.op[i], s.cut[i] = "sync", false
		case Train:
			if a.Step != s.ms[i].Done()+1 {
				s.fail("rank %d trains step %d after %d steps done", i, a.Step, s.ms[i].Done())
			}
			s.op[i], s.cut[i] = "step", false
		case Finish:
			s.op[i] = "finish"
		case Cut:
			if s.op[i] != "sync" && s.op[i] != "step" {
				s.fail("rank %d cuts short %q", i, s.op[i])
			}
			s.cut[i] = true
		case WakeAt:
			if !a.At.After(s.now) {
				s.fail("rank %d asks to wake at %v, not after now", i, a.At)
			}
			s.wake[i] = a.At
		case End:
			s.op[i] = ""
			if a.Led {
				s.marker = true
			}
		}
	}
	s.checkStale(i, acts)
	if leadingBefore && !s.ms[i].Leading() && !s.ms[i].Ended() {
		if !slices.ContainsFunc(acts, func(a Action) bool { _, ok := a.(Follow); return ok }) {
			s.fail("rank %d stopped leading without following", i)
		}
	}
	s.checkLeaders()
	for _, ev := range answers {
		s.step(i, ev)
	}
}

func (s *sim) sendView(i int, a SendView) {
	v := a.View
	if len(v.Members) == 0 || v.Members[0] != i {
		s.fail("rank %d sends view %v, whose first member is not it", i, FormatView(v))
	}
	if slices.Contains(a.To, i) {
		s.fail("rank %d sends its view to itself", i)
	}
	if a.Wait || v.Gen != s.sent[i] { // tellLower resends the view in flight
		if v.Gen <= s.sent[i] || v.Gen <= s.got[i] {
			s.fail("rank %d sends generation %d after sending %d and receiving %d: generations only grow", i, v.Gen, s.sent[i], s.got[i])
		}
		if j, ok := s.senders[v.Gen]; ok && j != i {
			s.fail("ranks %d and %d both send generation %d", j, i, v.Gen)
		}
		s.senders[v.Gen], s.sent[i] = i, v.Gen
	}
	for _, to := range a.To {
		s.msgs = append(s.msgs, msg{to: to, view: v})
	}
	if a.Wait {
		s.op[i], s.opGen[i] = "sent", v.Gen
	}
}

// checkStale: a sync or step started in a view older than the newest
// received is cut at once (but a follower's step before the one at which
// a view ends training), as is a follower's that should lead.
func (s *sim) checkStale(i int, acts []Action) {
	m := s.ms[i]
	started, cut := false, false
	for _, a := range acts {
		switch a.(type) {
		case Sync, Train:
			started, cut = true, false
		case Cut:
			cut = true
		}
	}
	if !started || cut || m.Ended() {
		return
	}
	stale := s.got[i] > m.View().Gen || (!m.Leading() && m.leading())
	if stale && !(m.ph == followStep && m.newest != nil && m.newest.Stop && m.Done()+1 < m.newest.Step) {
		s.fail("rank %d runs view %d after receiving %d (or should lead) and does not cut it", i, m.View().Gen, s.got[i])
	}
}

// checkLeaders: never two leaders of one generation.
func (s *sim) checkLeaders() {
	for i, a := range s.ms {
		for j := i + 1; j < len(s.ms); j++ {
			b := s.ms[j]
			if a.Leading() && b.Leading() && a.View().Gen != 0 && a.View().Gen == b.View().Gen {
				s.fail("ranks %d and %d both lead generation %d", i, j, a.View().Gen)
			}
		}
	}
}

// answer completes machine i's operation in flight; ok: successfully
// unless it was cut short.
func (s *sim) answer(i int, ok bool) {
	m := s.ms[i]
	// An operation cut short fails, unless it was done already.
	ok = ok && (!s.cut[i] || s.rng.IntN(4) == 0)
	f := s.failure(ok)
	switch op := s.op[i]; op {
	case "sent":
		s.op[i] = ""
		var missing []int
		if !ok && s.rng.IntN(2) == 0 {
			for j := range s.ms {
				if s.rng.IntN(3) == 0 {
					missing = append(missing, j)
				}
			}
		}
		s.step(i, ViewSent{Gen: s.opGen[i], Failed: !ok, Missing: missing})
	case "sync":
		s.op[i] = ""
		if ok {
			s.step(i, Synced{Done: m.Done() + int64(s.rng.IntN(3))})
		} else {
			f.Fatal = false
			s.step(i, SyncFailed{f})
		}
	case "step":
		s.op[i] = ""
		if ok {
			s.step(i, Trained{Step: m.Done() + 1})
		} else {
			s.step(i, StepFailed{Step: m.Done() + 1, Failure: f})
		}
	case "finish":
		s.op[i] = ""
		s.step(i, Finished{Failed: !ok && s.rng.IntN(4) == 0})
	}
}

func (s *sim) failure(ok bool) Failure {
	if ok {
		return Failure{}
	}
	var f Failure
	switch s.rng.IntN(4) {
	case 0:
		f.PeerDown = true
		for j := range s.ms {
			if s.rng.IntN(3) == 0 {
				f.Down = append(f.Down, j)
			}
		}
	case 1:
		f.Notice = true
	}
	f.Mismatch = s.rng.IntN(20) == 0
	f.Fatal = s.rng.IntN(200) == 0
	return f
}

func (s *sim) deliver(k int) {
	m := s.msgs[k]
	s.msgs = slices.Delete(s.msgs, k, k+1)
	if m.left != nil {
		s.step(m.to, *m.left)
		return
	}
	s.step(m.to, ViewReceived{View: m.view})
}

// chaos runs n random events.
func (s *sim) chaos(n int) {
	for range n {
		i := s.rng.IntN(len(s.ms))
		switch r := s.rng.IntN(10); {
		case r < 2:
			j := s.rng.IntN(len(s.ms))
			if j != i {
				if s.rng.IntN(2) == 0 {
					s.step(i, PeerLost{Rank: j})
				} else {
					s.step(i, PeerAlive{Rank: j})
					s.step(i, Answered{Rank: j})
				}
			}
		case r < 5 && len(s.msgs) > 0:
			k := s.rng.IntN(len(s.msgs))
			if s.rng.IntN(5) == 0 {
				s.msgs = slices.Delete(s.msgs, k, k+1) // lost on the way
			} else {
				s.deliver(k)
			}
		case r < 9:
			s.answer(i, s.rng.IntN(3) != 0)
		default:
			s.now = s.now.Add(time.Duration(s.rng.IntN(3000)) * time.Millisecond)
			s.step(i, Tick{})
		}
	}
}

// heal makes every heartbeat answer, delivers every view and lets every
// operation succeed: the ring must settle with rank 0 leading and every
// other rank in its view.
func (s *sim) heal() { s.healUntil(s.settled, "rank 0 leading every rank") }

// allEnded reports whether every machine has ended.
func (s *sim) allEnded() bool {
	return !slices.ContainsFunc(s.ms, func(m *Machine) bool { return !m.Ended() })
}

// healUntil heals the world until goal holds.
func (s *sim) healUntil(goal func() bool, what string) {
	for i, m := range s.ms {
		for j := range s.ms {
			if j != i && !s.ms[j].Ended() {
				if m.Lost(j) {
					s.step(i, PeerAlive{Rank: j})
				}
				s.step(i, Answered{Rank: j})
			}
		}
	}
	for range 5000 {
		if goal() {
			return
		}
		s.bury()
		i, j := s.rng.IntN(len(s.ms)), s.rng.IntN(len(s.ms))
		if i != j && !s.ms[j].Ended() && s.rng.IntN(4) == 0 {
			s.step(i, Answered{Rank: j}) // the heartbeats go on
			continue
		}
		if len(s.msgs) > 0 {
			s.deliver(0)
			continue
		}
		if !s.progress() {
			// Nothing can move: time passes to the next deadline.
			next := time.Time{}
			for _, w := range s.wake {
				if !w.IsZero() && (next.IsZero() || w.Before(next)) {
					next = w
				}
			}
			if next.IsZero() {
				// No deadline of the machines': an operation that waits
				// for members that run something else reaches its own.
				var busy []int
				for k := range s.ms {
					if s.op[k] == "sync" || s.op[k] == "step" {
						busy = append(busy, k)
					}
				}
				if len(busy) == 0 {
					break
				}
				s.answerFailed(busy[s.rng.IntN(len(busy))], Failure{})
				continue
			}
			if next.After(s.now) {
				s.now = next
			}
			for i := range s.ms {
				s.step(i, Tick{})
			}
		}
	}
	if goal() {
		return
	}
	var state string
	for i, m := range s.ms {
		state += fmt.Sprintf("\nrank %d: phase %d leading %v view %s op %q excluded %v lost %v", i, m.ph, m.Leading(), FormatView(m.View()), s.op[i], m.excluded, m.lost)
	}
	s.fail("the ring did not reach %s after healing:%s", what, state)
}

// progress completes one operation that can complete in a healed world,
// and reports whether there was one. Views are sent and the last average
// done at once; a sync or a step is collective: it fails once cut short
// or once a member runs another view, and succeeds once every member of
// the view runs it.
func (s *sim) progress() bool {
	for _, i := range s.rng.Perm(len(s.ms)) {
		m := s.ms[i]
		switch s.op[i] {
		case "sent", "finish":
			s.answer(i, true)
			return true
		case "sync", "step":
			if s.cut[i] || !s.agreed(i) {
				s.answerFailed(i, Failure{Notice: true}) // a member told of it
				return true
			}
			v, most := m.View(), int64(-1)
			all := true
			for _, k := range v.Members {
				all = all && s.op[k] == s.op[i] && s.ms[k].Done() == m.Done()
				most = max(most, s.ms[k].Done())
			}
			if s.op[i] == "sync" {
				all = true
				for _, k := range v.Members {
					all = all && s.op[k] == "sync"
				}
			}
			if !all {
				continue
			}
			op := s.op[i]
			for _, k := range v.Members {
				s.op[k] = ""
				if op == "sync" {
					s.step(k, Synced{Done: most})
				} else {
					s.step(k, Trained{Step: s.ms[k].Done() + 1})
				}
			}
			return true
		}
	}
	return false
}

// answerFailed fails machine i's sync or step with f.
func (s *sim) answerFailed(i int, f Failure) {
	op := s.op[i]
	s.op[i] = ""
	if op == "sync" {
		s.step(i, SyncFailed{f})
		return
	}
	s.step(i, StepFailed{Step: s.ms[i].Done() + 1, Failure: Failure{Notice: true}})
}

// bury makes the ranks whose machine ended (their process exited) lost
// to every other rank's heartbeats.
func (s *sim) bury() {
	for e, dead := range s.ms {
		if !dead.Ended() {
			continue
		}
		for i, m := range s.ms {
			if i != e && !m.Ended() && !m.Lost(e) {
				s.step(i, PeerLost{Rank: e})
			}
		}
	}
}

// agreed reports whether every member of machine i's view is in that
// view: an operation among members that run different views fails (the
// all-reduce of one view is never joined by another's).
func (s *sim) agreed(i int) bool {
	v := s.ms[i].View()
	for _, k := range v.Members {
		if s.ms[k].View().Gen != v.Gen || s.ms[k].Ended() {
			return false
		}
	}
	return true
}

func (s *sim) settled() bool {
	lead := s.ms[0]
	if !lead.Leading() || len(s.msgs) > 0 {
		return false
	}
	for _, m := range s.ms[1:] {
		if m.Leading() || m.View().Gen != lead.View().Gen {
			return false
		}
	}
	return true
}

// TestRandomWorlds checks, over many random event orders, that
// generations only grow, that a rank leads only once every lower rank is
// lost in its heartbeats, that no two ranks send or lead one generation,
// that a rank hands the lead only to a lower one, and that once the
// world heals the ring settles: rank 0 leads and every rank trains in
// its view.
func TestRandomWorlds(t *testing.T) {
	seeds := 400
	if testing.Short() {
		seeds = 50
	}
	for seed := range uint64(seeds) {
		ranks := 2 + int(seed%3)
		s := newSim(t, seed, ranks, 1<<20)
		for i := range s.ms {
			s.step(i, Start{})
		}
		s.chaos(300)
		if slices.ContainsFunc(s.ms, (*Machine).Ended) {
			continue // a fatal or mismatched step ended a rank: nothing to settle
		}
		s.heal()
	}
}

// TestRandomWorldsEnd runs short trainings: the promises hold through the
// end of training, and once the world heals every rank ends.
func TestRandomWorldsEnd(t *testing.T) {
	for seed := range uint64(200) {
		s := newSim(t, 1000+seed, 2+int(seed%3), 5)
		for i := range s.ms {
			s.step(i, Start{})
		}
		s.chaos(100)
		s.healUntil(s.allEnded, "the end of training on every rank")
	}
}
