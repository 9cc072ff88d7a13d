// Package ringstate is the membership and leadership of an elastic
// all-reduce ring as a pure state machine: events in, actions out, no
// goroutines, channels, clocks or I/O inside (in the spirit of etcd raft's
// Step). The estimator's ring loop is its shell: it turns heartbeats,
// views received and the outcomes of its operations into events, and
// carries out the actions (sending views, syncing, training steps,
// checkpoints) on the ring.
//
//	m, _ := ringstate.New(ringstate.Config{Rank: 1, Ranks: 3, Steps: 1000, LostAfter: time.Second})
//	for _, a := range m.Step(time.Now(), ringstate.Start{Done: restored}) {
//		switch a := a.(type) {
//		case ringstate.SendView: // ring.SendViewTo(ctx, a.View, a.To); if a.Wait, step ViewSent
//		case ringstate.Train:    // train a.Step; step Trained or StepFailed
//		...
//		}
//	}
//
// # State
//
// Each rank keeps what its heartbeats say of the others (lost or alive),
// the ranks a failed step found down (excluded), the newest view received
// from another rank, the count of steps it has done, and its role:
// follower (waiting for a view, syncing, training, finishing) or leader
// (asking whether training ended elsewhere, probing the summation
// servers, sending a view, syncing, training, waiting for the heartbeats
// after a failure, finishing, sending the view that ends training).
//
// # Decisions
//
// Who leads. The lowest rank alive: a rank leads once every rank below it
// is lost in its own heartbeats (rank 0 always leads). A follower waiting
// for a view, syncing or training takes the lead as soon as that holds;
// an operation in flight is cut short first.
//
// Which views are sent. The leader sends a view (generation, first step,
// members, sync, route) at its first step, after any failed step or sync
// (some members may have applied the step and others not), and whenever
// the members change: itself first, then every rank its heartbeats see
// alive, lower ranks included (a rank back from a pause may not count
// them lost again yet: it leads them until one of them sends a newer
// view), but not the ranks excluded. The generation is newer than any the
// rank sent, took or received, and at least the clock's milliseconds, so
// that a restarted rank, which remembers none, outdoes its predecessor.
// An acting leader also sends each view to the lower ranks its heartbeats
// see alive, once per view, so that a lower rank back learns at once that
// another rank leads.
//
// Which views are taken. A rank keeps only views newer than the newest it
// has. A follower takes each one newer than the last it took: a view that
// stops ends training; one that leaves it out makes it wait to be let
// back in; otherwise it re-forms the ring among the members and, when the
// view asks, syncs: every member takes the model and input position of
// the member that has done the most steps. A newer view cuts the
// follower's sync or step short (but a view that stops lets a step before
// its own finish).
//
// When the lead is handed back. A leader whose sync or step is cut short
// by a newer view from another rank looks at it at the top of its loop:
// from a lower rank, it counts that rank alive and follows it; from a
// higher rank (two would-be leaders), it ignores it, and its next view,
// newer still, makes that rank follow. So the lower rank wins.
//
// Failures. A leader's sync or step is cut short when a rank is lost. A
// failure that names ranks down excludes them at once; one that a member
// told of, or one of the summation servers, needs no wait; otherwise the
// leader waits, twice the lost deadline at most, for a heartbeat to change
// (one seen since it last waited counts) or for a newer view. An excluded
// rank is let back in once it has answered a heartbeat since it was
// excluded (a new process, or the old one awake again). A step that fails
// because the ranks' data do not match, MaxMismatches views in a row at
// the same step, ends training with an error; any other failure starts
// the count again. A fatal failure (the shell's Failure.Fatal: a NaN loss,
// a hook that failed, the rank's own input or computation failing) ends
// it at once.
//
// Departures. A member whose sync or step of a view fails, for a cause
// the others were not told of, tells them that it left the view (Leave):
// it waits for the next view, and they would otherwise wait for its part
// until their step deadline. The leader, told (MemberLeft), cuts its sync
// or step of that view short and sends a new view at once, and does not
// train in a view that a member left even when its own operation
// succeeded. A member that leaves two views in a row at the same step is
// left out until it answers a heartbeat again. Ranks that did not take
// the leader's view (ViewSent.Missing) cannot take part in it: they are
// left out of a new view at once, until they answer a heartbeat again.
//
// Routes. On a ring with summation servers, every view after the first
// asks whether a server is down: the view then goes round the ring, and
// the leader asks again every ServerRetry, making a new view through the
// servers once they all answer.
//
// When training ends. The leader, at the target step, runs the last
// average among its members, then sends every rank a view that stops, and
// ends as the rank that led (it saves the final checkpoint and marks the
// end). A follower ends on that view. A rank that finds that training
// ended elsewhere while it was away (the end-of-training marker, asked
// with CheckEnded before each new view and after each failure, and polled
// while a follower waits) ends at once, except rank 0, which takes the
// final checkpoint and ends as the leader. A follower that waits longer
// than WaitTimeout for a view ends with an error.
//
// # Contract
//
// The shell steps the machine from one goroutine (or under one lock), in
// the order things happened, with the time each happened. CheckEnded and
// ProbeServers are questions: their answers (Ended, ServersProbed) are
// stepped before any other event. Sync, Train, Finish and a SendView with
// Wait are operations: exactly one is in flight at a time, and its answer
// comes when it is done (a Cut makes it fail sooner). WakeAt asks for a
// Tick at a time. After End, the machine ignores every event.
//
// # Tests
//
// testdata/*.trace are traces of events (a config line, then one event a
// line, at a time in milliseconds); testdata/*.golden hold each trace with
// the actions the machine emitted, and are rewritten with
//
//	go test ./estimator/internal/ringstate -run TestTraces -update
//
// A randomized test runs rings of machines through random worlds and
// checks their promises (generations only grow, a rank leads only once
// every lower rank is lost to it, the lead goes only to a lower rank, no
// two ranks lead one generation, a stale operation is cut, and a healed
// world settles with rank 0 leading every rank, or ends on every rank).
package ringstate
