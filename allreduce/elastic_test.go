package allreduce_test

import (
	"context"
	"errors"
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
	rings, err := allreduce.NewInProcess(3, allreduce.InProcessConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, r := range rings {
			r.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
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
	rings, err := allreduce.NewInProcess(3, allreduce.InProcessConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, r := range rings {
			r.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
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
