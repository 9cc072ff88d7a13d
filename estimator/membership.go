package estimator

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/distflow/distflow/cluster"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/rpc"
)

// peerState is what a replica's heartbeats say of a peer.
type peerState int

const (
	// peerAlive: the last heartbeat was answered.
	peerAlive peerState = iota
	// peerSuspect: a heartbeat failed, for less than the lost deadline.
	peerSuspect
	// peerLost: no heartbeat answered for the lost deadline; the cluster
	// goes on without it.
	peerLost
)

func (s peerState) String() string {
	return [...]string{"alive", "suspect", "lost"}[s]
}

// heartbeats returns the interval between two heartbeats and the time
// after which a peer that answers none is lost: RunConfig.LostAfter
// (default a quarter of the step deadline, 1 s to 15 s), so that a lost
// peer is noticed well within one step deadline.
func (c RunConfig) heartbeats() (interval, lostAfter time.Duration) {
	lostAfter = c.LostAfter
	if lostAfter == 0 {
		lostAfter = min(max(c.StepTimeout/4, time.Second), 15*time.Second)
	}
	interval = min(max(lostAfter/5, 50*time.Millisecond), time.Second)
	return interval, lostAfter
}

// membership watches peers with heartbeats (GetStatus calls, each on a
// fresh connection so that a peer restarted on its address is seen as
// soon as it listens) and reports every change of a peer between live
// and lost. A peer that has answered and now refuses connections has
// exited (rpc.Exited) and is lost at once; one that stops answering
// (stopped, partitioned, or a dead task whose address a supervisor still
// holds) is lost after lostAfter. Every change
// is logged, naming the task, since when it has not answered and what
// the cluster does about it.
type membership struct {
	cfg      RunConfig
	log      *slog.Logger
	peers    map[int]cluster.TaskID // by replica index
	waiting  string                 // what the cluster waits for, in the logs
	onChange func(i int, alive bool)
	// onAnswer, when set, is called at every heartbeat peer i answers.
	onAnswer func(i int)

	mu     sync.Mutex
	state  map[int]peerState
	since  map[int]time.Time // last heartbeat answered
	warned map[int]bool      // a suspect's silence was logged as a warning
	// answered holds the peers that have answered a heartbeat: a refusal
	// from one of them may mean its process exited.
	answered map[int]bool
	// incarnation is each peer's process as its last answer gave it.
	incarnation map[int]uint64
	// observed is when each peer's last heartbeat ended, and counted
	// when its silence counts from: this process's own pauses (it was
	// stopped, or starved of CPU) are not the peer's silence.
	observed, counted map[int]time.Time
}

// watch starts the heartbeats; they stop when ctx ends, and the returned
// function waits for that.
func (m *membership) watch(ctx context.Context) (wait func()) {
	m.state, m.since, m.warned, m.incarnation = map[int]peerState{}, map[int]time.Time{}, map[int]bool{}, map[int]uint64{}
	m.observed, m.counted, m.answered = map[int]time.Time{}, map[int]time.Time{}, map[int]bool{}
	var wg sync.WaitGroup
	interval, lostAfter := m.cfg.heartbeats()
	m.mu.Lock()
	for i := range m.peers {
		m.state[i], m.since[i] = peerAlive, time.Now()
	}
	m.mu.Unlock()
	for i, t := range m.peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.beat(ctx, i, t, interval, lostAfter)
		}()
	}
	return wg.Wait
}

func (m *membership) beat(ctx context.Context, i int, t cluster.TaskID, interval, lostAfter time.Duration) {
	addr, err := m.cfg.Cluster.Address(t)
	if err != nil {
		return
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		// A generous timeout: a loaded machine answers late, and late is
		// not lost; a dead peer refuses at once.
		known := m.hasAnswered(i)
		st, err := m.status(ctx, addr, known, max(lostAfter/2, 500*time.Millisecond))
		if ctx.Err() != nil {
			return
		}
		exited := err != nil && known && rpc.Exited(ctx, addr, err)
		if err == nil && m.restarted(i, st.GetIncarnation()) {
			// A new process answers on the address before the old one's
			// silence could count: it is lost and back at once, so that
			// nothing waits for what the old one held.
			if t.Job == "ps" {
				m.log.Warn("a ps task was restarted: the variables it held are gone", "peer", t.String(), "incarnation", st.GetIncarnation(),
					"next", m.psRestored("them"))
			} else {
				m.log.Warn("a replica was restarted; letting the new process in", "peer", t.String(), "incarnation", st.GetIncarnation())
			}
			m.onChange(i, false)
			m.onChange(i, true)
		}
		m.observe(i, t, err, exited)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// status asks the peer at addr for its status, waiting at most timeout.
// A peer that has answered before (known) is not waited for while it
// refuses connections: the refusal comes back at once, for rpc.Exited.
func (m *membership) status(ctx context.Context, addr string, known bool, timeout time.Duration) (*pb.GetStatusResponse, error) {
	if !known {
		return TaskStatus(ctx, addr, timeout, m.cfg.rpc)
	}
	return taskStatus(ctx, rpc.DialKnownWorker, addr, timeout, m.cfg.rpc)
}

// hasAnswered reports whether peer i has answered a heartbeat.
func (m *membership) hasAnswered(i int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.answered[i]
}

// observe moves peer i through its states after a heartbeat that failed
// with err (nil: answered); exited says that the peer's process has
// exited (a peer that answered before refuses connections), which needs
// no lost deadline: nothing will answer on its behalf until it is
// restarted.
func (m *membership) observe(i int, t cluster.TaskID, err error, exited bool) {
	_, lostAfter := m.cfg.heartbeats()
	m.mu.Lock()
	now, prev, since := time.Now(), m.state[i], m.since[i]
	if last := m.observed[i]; err != nil && !last.IsZero() && now.Sub(last) > lostAfter {
		// No heartbeat of this process ended for longer than the lost
		// deadline: this process was not running (stopped, starved), and
		// a heartbeat that spanned the pause failed for that. The peer's
		// silence counts from now, not from its last answer.
		m.counted[i] = now
	}
	m.observed[i] = now
	silent := since
	if c := m.counted[i]; c.After(silent) {
		silent = c
	}
	next := prev
	switch {
	case err == nil:
		next, m.since[i], m.answered[i] = peerAlive, now, true
	case exited, now.Sub(silent) >= lostAfter:
		next = peerLost
	case prev == peerAlive:
		next = peerSuspect
	}
	m.state[i] = next
	// A silence half as long as the lost deadline is worth a warning (a
	// stopped or partitioned task), once.
	warn := next == peerSuspect && !m.warned[i] && now.Sub(since) >= lostAfter/2
	if warn {
		m.warned[i] = true
	}
	if next == peerAlive {
		m.warned[i] = false
	}
	m.mu.Unlock()
	if err == nil && m.onAnswer != nil {
		m.onAnswer(i)
	}
	if warn {
		m.log.Warn("a replica has not answered for a while", "peer", t.String(), "since", since.Format(time.RFC3339Nano),
			"for", now.Sub(since).Round(time.Millisecond), "lost_after", lostAfter, "err", err)
	}
	if next == prev {
		return
	}
	switch {
	case next == peerSuspect:
		m.log.Info("a replica does not answer", "peer", t.String(), "since", since.Format(time.RFC3339Nano), "lost_after", lostAfter, "err", err)
	case next == peerLost:
		why := "no answer for the lost deadline"
		if exited {
			why = "its process has exited (its address refuses connections)"
		}
		msg, waiting := "a replica is lost; going on without it", m.waiting
		if t.Job == "ps" {
			msg, waiting = "a ps task is lost: the variables it holds are gone until it is restarted", m.psRecovery()
		}
		m.log.Warn(msg, "peer", t.String(), "why", why, "no_answer_since", since.Format(time.RFC3339Nano),
			"for", now.Sub(since).Round(time.Millisecond), "waiting_for", waiting, "err", err)
		m.onChange(i, false)
	case prev == peerLost:
		msg := "a lost replica answers again; letting it back in"
		if t.Job == "ps" {
			msg = "a lost ps task answers again; the next step finds its variables restored or initialised"
		}
		m.log.Warn(msg, "peer", t.String(), "lost_for", now.Sub(since).Round(time.Millisecond))
		m.onChange(i, true)
	}
}

// psRecovery says what training does about a lost ps task: the steps
// that need it fail, the replicas wait for the cluster (up to the wait
// timeout), and the chief readies the model again, restoring the ps's
// variables from the latest checkpoint, or initialising them without
// one (train.MonitoredSession's recovery).
func (m *membership) psRecovery() string {
	return fmt.Sprintf("its restart, for up to %v; then %s", m.cfg.WaitTimeout, m.psRestored("its variables"))
}

// psRestored says what becomes of a restarted ps task's variables, named
// vars.
func (m *membership) psRestored(vars string) string {
	if m.cfg.CheckpointDir == "" {
		return "the chief initialises " + vars + " again (no checkpoint directory: their training is lost)"
	}
	return "the chief restores " + vars + " from the latest checkpoint in " + m.cfg.CheckpointDir
}

// restarted records peer i's incarnation and reports whether it changed
// (a new process on the address) while the peer was not lost.
func (m *membership) restarted(i int, inc uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	prev, seen := m.incarnation[i]
	m.incarnation[i] = inc
	return seen && inc != 0 && prev != inc && m.state[i] != peerLost
}

// lost lists the peers lost now.
func (m *membership) lost() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for i, s := range m.state {
		if s == peerLost {
			out = append(out, m.peers[i].String())
		}
	}
	return out
}

// watchCluster watches, for the logs only, the tasks that no coordinator
// watches: the chief watches the ps tasks, and with replicas (when no
// coordinator watches them) the other replicas, which watch the chief. It
// returns the function that stops the watch.
func watchCluster(ctx context.Context, r *replica, replicas bool) (stop func()) {
	peers := map[int]cluster.TaskID{}
	if r.chief() {
		for i := range r.cfg.Cluster.NumTasks("ps") {
			peers[-1-i] = cluster.TaskID{Job: "ps", Index: i} // keys apart from the replicas'
		}
	}
	if replicas {
		for i, t := range r.reps {
			if i != r.index && (r.chief() || i == 0) {
				peers[i] = t
			}
		}
	}
	if len(peers) == 0 {
		return func() {}
	}
	wctx, cancel := context.WithCancel(ctx)
	m := &membership{cfg: r.cfg, log: r.log, peers: peers, onChange: func(int, bool) {},
		waiting: "its return (the session recovers, or the step deadline ends the step)"}
	watched := m.watch(wctx)
	return func() { cancel(); watched() }
}
