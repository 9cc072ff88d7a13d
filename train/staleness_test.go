package train_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/train"
)

// stalenessRig returns the bounds of replicas sharing one graph and session.
func stalenessRig(t *testing.T, replicas, bound int) ([]*train.StalenessBound, *session.Session) {
	t.Helper()
	s := graph.NewScope()
	var sbs []*train.StalenessBound
	for i := range replicas {
		sbs = append(sbs, train.NewStalenessBound(s, replicas, i, bound))
	}
	init := ops.GlobalVariablesInitializer(s)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if n := len(ops.GlobalVariables(s.Graph())); n != replicas {
		t.Fatalf("%d counters, want %d shared ones", n, replicas)
	}
	sess := syncSession(t, s.Graph())
	if _, err := sess.Run(context.Background(), nil, nil, []*graph.Node{init}); err != nil {
		t.Fatal(err)
	}
	return sbs, sess
}

// TestStalenessBoundWaitsForTheSlowest runs replica 0 ahead of replica 1
// with bound 2: its Wait returns at once while it is at most 2 ahead, and
// waits for replica 1's Advance (or Done) otherwise.
func TestStalenessBoundWaitsForTheSlowest(t *testing.T) {
	sbs, sess := stalenessRig(t, 2, 2)
	ctx := context.Background()
	for range 2 {
		if err := sbs[0].Wait(ctx, sess); err != nil {
			t.Fatal(err)
		}
		if err := sbs[0].Advance(ctx, sess); err != nil {
			t.Fatal(err)
		}
	}
	if err := sbs[0].Wait(ctx, sess); err != nil { // 2 ahead: allowed
		t.Fatal(err)
	}
	if err := sbs[0].Advance(ctx, sess); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- sbs[0].Wait(ctx, sess) }() // 3 ahead: waits
	select {
	case err := <-waited:
		t.Fatalf("Wait returned %v while 3 steps ahead with bound 2", err)
	default:
	}
	if err := sbs[1].Advance(ctx, sess); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	steps, err := sbs[1].Steps(ctx, sess)
	if err != nil || steps[0] != 3 || steps[1] != 1 {
		t.Errorf("steps = %v, %v; want [3 1]", steps, err)
	}
	// A finished replica holds nobody back.
	if err := sbs[1].Done(ctx, sess); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := sbs[0].Advance(ctx, sess); err != nil {
			t.Fatal(err)
		}
	}
	if err := sbs[0].Wait(ctx, sess); err != nil {
		t.Errorf("Wait with the other replica done: %v", err)
	}
}

func TestStalenessBoundWaitEndsWithContext(t *testing.T) {
	sbs, sess := stalenessRig(t, 2, 0)
	if err := sbs[0].Advance(context.Background(), sess); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	waited := make(chan error, 1)
	go func() { waited <- sbs[0].Wait(ctx, sess) }()
	cancel()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

func TestStalenessBoundArguments(t *testing.T) {
	for _, tc := range []struct{ replicas, index, bound int }{{0, 0, 1}, {2, 2, 1}, {2, -1, 1}, {2, 0, -1}} {
		s := graph.NewScope()
		if sb := train.NewStalenessBound(s, tc.replicas, tc.index, tc.bound); sb != nil || s.Err() == nil ||
			!strings.Contains(s.Err().Error(), "want 0 <= index < replicas and bound >= 0") {
			t.Errorf("%+v: got %v, %v; want an error", tc, sb, s.Err())
		}
	}
}
