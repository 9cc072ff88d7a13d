package allreduce_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/distflow/distflow/allreduce"
)

// TestRingReformsAmongViews: a ring of 3 runs among all 3, then among 2
// (rank 2 lost: a view without it), then grows back to 3; each member
// takes rank 0's views and the sums are over the members alone.
func TestRingReformsAmongViews(t *testing.T) {
	rings, ctx := threeRings(t)
	for gen, members := range [][]int{{0, 1, 2}, {0, 1}, {0, 1, 2}} {
		v := allreduce.View{Gen: int64(gen + 1), Step: int64(10 * gen), Members: members, Sync: gen == 2}
		if err := rings[0].SendView(ctx, v); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		got := make([][]float32, 3)
		for _, m := range members {
			wg.Go(func() {
				view := v
				if m != 0 {
					var err error
					if view, err = rings[m].NextView(ctx, int64(gen)); err != nil {
						t.Errorf("rank %d: %v", m, err)
						return
					}
				}
				if view.Gen != v.Gen || view.Step != v.Step || view.Sync != v.Sync || !slices.Equal(view.Members, members) {
					t.Errorf("rank %d took view %+v; want %+v", m, view, v)
				}
				g, err := rings[m].Among(view)
				if err != nil {
					t.Error(err)
					return
				}
				data := []float32{float32(m + 1), 10}
				if err := g.AllReduce(ctx, "grads", view.Step, data); err != nil {
					t.Errorf("rank %d, view %d: %v", m, view.Gen, err)
				}
				got[m] = data
			})
		}
		wg.Wait()
		var want float32
		for _, m := range members {
			want += float32(m + 1)
		}
		for _, m := range members {
			if got[m] == nil || got[m][0] != want || got[m][1] != float32(10*len(members)) {
				t.Errorf("view %v: rank %d has %v; want [%v %v]", members, m, got[m], want, 10*len(members))
			}
		}
	}
	// Rank 2 is not a member of a view without it, and a rank only
	// takes views newer than the last.
	if _, err := rings[2].Among(allreduce.View{Gen: 9, Members: []int{0, 1}}); err == nil {
		t.Error("Among a view without this rank: no error")
	}
	sctx, scancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer scancel()
	if _, err := rings[1].NextView(sctx, 3); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("NextView after the newest: %v; want the deadline", err)
	}
}

// TestAnyRankLeads: rank 0 lost, rank 1 leads a view of {1, 2} (newer
// than rank 0's last) and the members take it and reduce among
// themselves; a view whose sender is not its first member is refused by
// SendView, and rank 0's older view no longer counts.
func TestAnyRankLeads(t *testing.T) {
	rings, ctx := threeRings(t)
	if err := rings[0].SendView(ctx, allreduce.View{Gen: 5, Members: []int{0, 1, 2}}); err != nil {
		t.Fatal(err)
	}
	if err := rings[1].SendView(ctx, allreduce.View{Gen: 6, Members: []int{0, 1, 2}}); err == nil {
		t.Error("rank 1 sent a view whose first member is rank 0: no error")
	}
	v := allreduce.View{Gen: 6, Step: 40, Members: []int{1, 2}, Sync: true}
	if err := rings[1].SendView(ctx, v); err != nil {
		t.Fatal(err)
	}
	got, err := rings[2].NextView(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	if got.Gen != 6 || !slices.Equal(got.Members, []int{1, 2}) {
		t.Fatalf("rank 2 took %+v; want rank 1's view %+v", got, v)
	}
	var wg sync.WaitGroup
	data := [][]float32{nil, {1, 2}, {3, 4}}
	for _, m := range []int{1, 2} {
		wg.Go(func() {
			g, err := rings[m].Among(v)
			if err != nil {
				t.Error(err)
				return
			}
			if m == 1 && g.Rank() != 0 {
				t.Errorf("the leader's position: %d; want 0", g.Rank())
			}
			if err := g.AllReduce(ctx, "grads", 40, data[m]); err != nil {
				t.Errorf("rank %d: %v", m, err)
			}
		})
	}
	wg.Wait()
	for _, m := range []int{1, 2} {
		if !slices.Equal(data[m], []float32{4, 6}) {
			t.Errorf("rank %d has %v; want [4 6]", m, data[m])
		}
	}
}

// threeRings returns an in-process ring of 3, closed when the test ends,
// and a context with a deadline for its operations.
func threeRings(t *testing.T) ([]*allreduce.Ring, context.Context) {
	t.Helper()
	rings, err := allreduce.NewInProcess(3, allreduce.InProcessConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, r := range rings {
			r.Close()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return rings, ctx
}

// refusing is a transport whose Open to rank to fails, as a connection
// that waits out a backoff after its peer restarted does, until heal is
// closed.
type refusing struct {
	allreduce.Transport
	to   int
	heal chan struct{}
}

func (t *refusing) Open(ctx context.Context, to int, op allreduce.Op) (allreduce.Stream, error) {
	select {
	case <-t.heal:
	default:
		if to == t.to {
			return nil, fmt.Errorf("rank %d refuses: %w", to, allreduce.ErrPeerUnreachable)
		}
	}
	return t.Transport.Open(ctx, to, op)
}

// TestLeaveViewIsTakenOnceTheMemberAnswers: rank 2 leaves view 7 while
// its connection to rank 0 refuses; it tells the members again until
// they take it, and then rank 0's operation of the view fails at once
// (ErrViewFailed), well within its deadline, and rank 0 learns which
// member left which view. A departure of an older view is not reported
// after a newer one; a notice to a member that cannot be reached stops
// once a newer view arrives.
func TestLeaveViewIsTakenOnceTheMemberAnswers(t *testing.T) {
	recv := make([]allreduce.Receiver, 3) // the network's: filled as the rings are made
	net := allreduce.NewMemNetwork(recv, 0)
	peers := []string{"memory:0", "memory:1", "memory:2"}
	heal := make(chan struct{})
	rings := make([]*allreduce.Ring, 3)
	for i := range rings {
		var tr allreduce.Transport = net.Transport(i)
		if i == 2 {
			tr = &refusing{Transport: tr, to: 0, heal: heal}
		}
		r, err := allreduce.NewRing(allreduce.Config{Rank: i, Peers: peers}, tr)
		if err != nil {
			t.Fatal(err)
		}
		rings[i] = r
		recv[i] = r
		t.Cleanup(func() { r.Close() })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v := allreduce.View{Gen: 7, Step: 1, Members: []int{0, 1, 2}, Sync: true}
	g0, err := rings[0].Among(v)
	if err != nil {
		t.Fatal(err)
	}
	opErr := make(chan error, 1)
	go func() { opErr <- g0.AllReduce(ctx, "steps_done", -1, make([]float32, 6)) }()

	left := make(chan error, 1)
	go func() { left <- rings[2].LeaveView(ctx, v) }()
	time.AfterFunc(300*time.Millisecond, func() { close(heal) })
	start := time.Now()
	if err := <-left; err != nil {
		t.Fatalf("LeaveView: %v", err)
	}
	if err := <-opErr; !errors.Is(err, allreduce.ErrViewFailed) {
		t.Errorf("rank 0's operation of the view left: %v; want ErrViewFailed", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("rank 0's operation failed %v after the notice could be taken; want at once", d)
	}
	d, err := rings[0].NextDeparture(ctx, -1)
	if err != nil || d != (allreduce.Departure{Gen: 7, Rank: 2}) {
		t.Errorf("NextDeparture: %+v, %v; want rank 2 left view 7", d, err)
	}
	if err := rings[1].LeaveView(ctx, allreduce.View{Gen: 5, Members: []int{0, 1}}); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer scancel()
	if d, err := rings[0].NextDeparture(sctx, 7); err == nil {
		t.Errorf("NextDeparture after view 7: %+v; want none (view 5 is older)", d)
	}

	// Rank 1 cannot reach rank 0 (cut); its notice stops at rank 0's
	// newer view.
	net.Cut(0)
	done := make(chan error, 1)
	go func() { done <- rings[1].LeaveView(ctx, allreduce.View{Gen: 8, Members: []int{0, 1, 2}}) }()
	if err := rings[2].SendView(ctx, allreduce.View{Gen: 9, Members: []int{2, 1}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("LeaveView still sends to a member that cannot be reached after a newer view")
	}
}

// TestSendViewNamesTheRanksThatDidNotTakeIt: a view sent to a rank that
// is cut fails with a ViewNotTakenError that names that rank alone.
func TestSendViewNamesTheRanksThatDidNotTakeIt(t *testing.T) {
	recv := make([]allreduce.Receiver, 3) // the network's: filled as the rings are made
	net := allreduce.NewMemNetwork(recv, 0)
	peers := []string{"memory:0", "memory:1", "memory:2"}
	rings := make([]*allreduce.Ring, 3)
	for i := range rings {
		r, err := allreduce.NewRing(allreduce.Config{Rank: i, Peers: peers}, net.Transport(i))
		if err != nil {
			t.Fatal(err)
		}
		rings[i] = r
		recv[i] = r
		t.Cleanup(func() { r.Close() })
	}
	net.Cut(2)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := rings[0].SendView(ctx, allreduce.View{Gen: 3, Members: []int{0, 1, 2}})
	var nt *allreduce.ViewNotTakenError
	if !errors.As(err, &nt) || nt.Gen != 3 || !slices.Equal(nt.Ranks, []int{2}) || !errors.Is(err, allreduce.ErrPeerUnreachable) {
		t.Fatalf("SendView to a cut rank: %v; want a ViewNotTakenError naming rank 2", err)
	}
	if v, err := rings[1].NextView(ctx, -1); err != nil || v.Gen != 3 {
		t.Errorf("rank 1: %+v, %v; want view 3", v, err)
	}
}
