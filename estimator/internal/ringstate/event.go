package ringstate

import (
	"fmt"
	"strings"
	"time"

	"github.com/distflow/distflow/allreduce"
)

// An Event is what the shell tells the machine: a heartbeat's verdict, a
// view received, the outcome of an action it ran, or the passing of time.
type Event interface {
	event()
	String() string
}

// Start begins the machine: this rank leads (rank 0, or every lower rank
// lost) or follows. Done is the count of steps restored from a checkpoint.
type Start struct{ Done int64 }

// PeerLost: the heartbeats count Rank lost (no answer for the lost
// deadline, or a restarted process: lost and at once alive again).
type PeerLost struct{ Rank int }

// PeerAlive: a lost Rank answers its heartbeats again.
type PeerAlive struct{ Rank int }

// Answered: Rank answered a heartbeat (any, not only a change of state):
// a rank left out after a failed step is let back in once it has answered
// since.
type Answered struct{ Rank int }

// ViewReceived: another rank sent View (the ring keeps the newest; older
// or equal generations are ignored).
type ViewReceived struct{ View allreduce.View }

// ViewSent answers a SendView that waits: every addressee took the view,
// or (Failed) one did not within the deadline; Missing names those known
// not to have taken it (they cannot take part in its operations).
type ViewSent struct {
	Gen     int64
	Failed  bool
	Missing []int
}

// MemberLeft: Rank told that it left view Gen (an operation of the view
// failed on it, or was given up, and it waits for the next view).
type MemberLeft struct {
	Gen  int64
	Rank int
}

// Ended answers CheckEnded: training has ended elsewhere (the marker names
// the target step; with CheckEnded.Final, the final checkpoint is taken).
type Ended struct{ Yes bool }

// MarkerSeen: a poll found the end-of-training marker (a follower that
// waits for a view exits on it).
type MarkerSeen struct{}

// ServersProbed answers ProbeServers: whether a summation server does not
// answer.
type ServersProbed struct{ Down bool }

// Synced: the members of the view agreed on one state; Done is the count
// of steps of the member furthest on, taken by every member.
type Synced struct{ Done int64 }

// Failure says why an operation of a view failed.
type Failure struct {
	// PeerDown: the operation found ranks down (allreduce.PeerDownError);
	// Down names them.
	PeerDown bool
	Down     []int
	// Notice: a member told that the view failed, or the summation
	// servers failed (allreduce.ErrViewFailed, ErrServerFailed): a new
	// view at once, without waiting for the heartbeats.
	Notice bool
	// Mismatch: the ranks' data did not match (allreduce.ErrMismatch).
	Mismatch bool
	// Fatal: an error that ends training (a NaN loss).
	Fatal bool
}

// SyncFailed: the sync of the view failed.
type SyncFailed struct{ Failure }

// Trained: the step was trained among the view's members. Stop: a hook of
// this rank asked to stop there (before the target): the leader ends
// training at this step; a follower leaves the ring.
type Trained struct {
	Step int64
	Stop bool
}

// StepFailed: the step failed.
type StepFailed struct {
	Step int64
	Failure
}

// Finished answers Finish (the last average among the members).
type Finished struct{ Failed bool }

// Tick: time passed (a WakeAt came due).
type Tick struct{}

// ViewsClosed: no view can come any more (the ring was closed): a
// follower that waits for one ends.
type ViewsClosed struct{}

func (Start) event()         {}
func (PeerLost) event()      {}
func (PeerAlive) event()     {}
func (Answered) event()      {}
func (ViewReceived) event()  {}
func (ViewSent) event()      {}
func (MemberLeft) event()    {}
func (Ended) event()         {}
func (MarkerSeen) event()    {}
func (ServersProbed) event() {}
func (Synced) event()        {}
func (SyncFailed) event()    {}
func (Trained) event()       {}
func (StepFailed) event()    {}
func (Finished) event()      {}
func (Tick) event()          {}
func (ViewsClosed) event()   {}

func (e Start) String() string        { return fmt.Sprintf("start done=%d", e.Done) }
func (e PeerLost) String() string     { return fmt.Sprintf("lost %d", e.Rank) }
func (e PeerAlive) String() string    { return fmt.Sprintf("alive %d", e.Rank) }
func (e Answered) String() string     { return fmt.Sprintf("answered %d", e.Rank) }
func (e ViewReceived) String() string { return "view " + FormatView(e.View) }
func (e ViewSent) String() string {
	s := fmt.Sprintf("sent gen=%d", e.Gen) + flagged(e.Failed, "failed")
	if len(e.Missing) > 0 {
		s += " missing=" + ranks(e.Missing)
	}
	return s
}
func (e MemberLeft) String() string { return fmt.Sprintf("left %d gen=%d", e.Rank, e.Gen) }
func (e Ended) String() string      { return "ended " + yesNo(e.Yes) }
func (MarkerSeen) String() string   { return "marker" }
func (e ServersProbed) String() string {
	return "servers " + map[bool]string{true: "down", false: "up"}[e.Down]
}
func (e Synced) String() string     { return fmt.Sprintf("synced done=%d", e.Done) }
func (e SyncFailed) String() string { return "sync-failed" + e.Failure.String() }
func (e Trained) String() string {
	return fmt.Sprintf("trained step=%d", e.Step) + flagged(e.Stop, "stop")
}
func (e StepFailed) String() string {
	return fmt.Sprintf("step-failed step=%d", e.Step) + e.Failure.String()
}
func (e Finished) String() string  { return "finished" + flagged(e.Failed, "failed") }
func (Tick) String() string        { return "tick" }
func (ViewsClosed) String() string { return "views-closed" }

func (f Failure) String() string {
	var b strings.Builder
	if f.PeerDown {
		b.WriteString(" down=" + ranks(f.Down))
	}
	b.WriteString(flagged(f.Notice, "notice") + flagged(f.Mismatch, "mismatch") + flagged(f.Fatal, "fatal"))
	return b.String()
}

// An Action is what the machine asks of the shell. Those marked "answer
// at once" are questions: the shell steps their answer before any other
// event.
type Action interface {
	action()
	String() string
}

// Lead: this rank leads the ring now (every lower rank is lost).
type Lead struct{}

// Follow: this rank follows; Leader is the lower rank whose newer view
// took the lead back, or -1 (at the start: whoever leads).
type Follow struct{ Leader int }

// CheckEnded asks whether training ended elsewhere while this rank was
// away (answer at once with Ended). Final (rank 0 leading): take the
// final checkpoint, and answer no if it cannot be restored.
type CheckEnded struct{ Final bool }

// ProbeServers asks whether a summation server is down (answer at once
// with ServersProbed).
type ProbeServers struct{}

// SendView sends View to the ranks To. Wait: the machine waits for
// ViewSent (a view to the members, the view that ends training); else it
// goes in the background (an acting leader telling lower ranks).
type SendView struct {
	View allreduce.View
	To   []int
	Wait bool
}

// Join re-forms the ring among View's members: the operations that
// follow (Sync, Train, Finish) run among them.
type Join struct{ View allreduce.View }

// Sync gives the members one state, that of the member furthest on
// (answer: Synced or SyncFailed).
type Sync struct{}

// Train trains Step among the members (answer: Trained or StepFailed).
type Train struct{ Step int64 }

// Cut cuts short the Sync or Train in flight: it fails, and its answer
// follows as usual.
type Cut struct{}

// Exclude leaves Ranks out of the leader's next views, for Cause. They
// are let back in once they answer a heartbeat.
type Exclude struct {
	Ranks []int
	Cause ExcludeCause
}

// ExcludeCause says why ranks are left out of the next views.
type ExcludeCause int

const (
	// FoundDown: a failed operation found them down.
	FoundDown ExcludeCause = iota
	// NotTaken: they did not take the leader's view.
	NotTaken
	// LeftAgain: a member left two views in a row at the same step.
	LeftAgain
)

// Leave tells the other members of View that this rank left it: an
// operation of the view failed here (for a cause they were not told of),
// and this rank waits for the next view. The leader then sends one at
// once, and the others stop waiting for this rank's part.
type Leave struct{ View allreduce.View }

// Readmit: Rank, left out after a failed step, answered since and is let
// back in.
type Readmit struct{ Rank int }

// Checkpoint: the leader trained Step; a checkpoint is due if the
// schedule says so.
type Checkpoint struct{ Step int64 }

// Finish runs the last average among the members (answer: Finished).
type Finish struct{}

// WakeAt asks for a Tick at At (a deadline of the machine's).
type WakeAt struct{ At time.Time }

// End ends the machine; no action follows.
type End struct {
	Reason Reason
	// Led: this rank led as training ended (it saves the final
	// checkpoint and marks the end).
	Led bool
	// Step and Mismatches, for ByMismatch: the step that failed, and in
	// how many views in a row.
	Step       int64
	Mismatches int
}

// Reason says why the machine ended.
type Reason int

const (
	// Done: training is over (the target step, or a view that stops).
	Done Reason = iota
	// Away: another rank ended training while this one was away.
	Away
	// ByMismatch: the ranks' data did not match in MaxMismatches views in
	// a row at the same step.
	ByMismatch
	// ByFatal: a step or the last average failed for good.
	ByFatal
	// WaitExpired: a follower waited for a view longer than WaitTimeout.
	WaitExpired
	// Stopped: a hook of this follower asked to stop; it leaves the ring.
	Stopped
	// Closed: a follower waits for a view, and none can come (ViewsClosed).
	Closed
)

func (r Reason) String() string {
	return [...]string{"done", "away", "mismatch", "fatal", "wait-expired", "stopped", "closed"}[r]
}

func (Lead) action()         {}
func (Follow) action()       {}
func (CheckEnded) action()   {}
func (ProbeServers) action() {}
func (SendView) action()     {}
func (Join) action()         {}
func (Sync) action()         {}
func (Train) action()        {}
func (Cut) action()          {}
func (Exclude) action()      {}
func (Leave) action()        {}
func (Readmit) action()      {}
func (Checkpoint) action()   {}
func (Finish) action()       {}
func (WakeAt) action()       {}
func (End) action()          {}

func (Lead) String() string         { return "lead" }
func (a Follow) String() string     { return fmt.Sprintf("follow leader=%d", a.Leader) }
func (a CheckEnded) String() string { return "check-ended" + flagged(a.Final, "final") }
func (ProbeServers) String() string { return "probe-servers" }
func (a Join) String() string       { return "join " + FormatView(a.View) }
func (Sync) String() string         { return "sync" }
func (a Train) String() string      { return fmt.Sprintf("train step=%d", a.Step) }
func (Cut) String() string          { return "cut" }
func (a Exclude) String() string {
	return "exclude " + ranks(a.Ranks) + [...]string{"", " not-taken", " left-again"}[a.Cause]
}
func (a Leave) String() string      { return "leave " + FormatView(a.View) }
func (a Readmit) String() string    { return fmt.Sprintf("readmit %d", a.Rank) }
func (a Checkpoint) String() string { return fmt.Sprintf("checkpoint step=%d", a.Step) }
func (Finish) String() string       { return "finish" }
func (a WakeAt) String() string     { return fmt.Sprintf("wake-at %d", a.At.UnixMilli()) }
func (a SendView) String() string {
	return "send-view " + FormatView(a.View) + " to=" + ranks(a.To) + flagged(a.Wait, "wait")
}
func (a End) String() string {
	s := "end " + a.Reason.String() + flagged(a.Led, "led")
	if a.Reason == ByMismatch {
		s += fmt.Sprintf(" step=%d mismatches=%d", a.Step, a.Mismatches)
	}
	return s
}

// FormatView writes v as the traces do: gen=G step=S members=a,b,c and
// its flags.
func FormatView(v allreduce.View) string {
	return fmt.Sprintf("gen=%d step=%d members=%s", v.Gen, v.Step, ranks(v.Members)) +
		flagged(v.Sync, "sync") + flagged(v.Stop, "stop") + flagged(v.RingOnly, "ringonly")
}

func ranks(rs []int) string {
	if len(rs) == 0 {
		return "none"
	}
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = fmt.Sprint(r)
	}
	return strings.Join(s, ",")
}

func flagged(on bool, name string) string {
	if on {
		return " " + name
	}
	return ""
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
