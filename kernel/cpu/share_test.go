package cpu

import (
	"slices"
	"sync"
	"testing"

	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/tensor"
)

// TestVariableCopyOnWrite checks the copy-on-write contract of
// kernel.Variable: a shared value never changes under its reader, whatever
// updates the variable; once every share is released, updates run in place
// again and a retired buffer is reused.
func TestVariableCopyOnWrite(t *testing.T) {
	updates := []struct {
		name   string
		update func(v *kernel.Variable) error
		want   float32 // element 0 after the update, from 1
	}{
		{"Update", func(v *kernel.Variable) error {
			return v.Update(func(t *tensor.Tensor) error { t.Float32s()[0] += 10; return nil })
		}, 11},
		{"LockValue", func(v *kernel.Variable) error {
			val, err := v.LockValue()
			if err != nil {
				return err
			}
			val.Float32s()[0] += 10
			v.UnlockValue()
			return nil
		}, 11},
		{"Assign", func(v *kernel.Variable) error { return v.Assign(tensor.MustFromSlice([]float32{7, 7, 7}, 3)) }, 7},
	}
	for _, u := range updates {
		t.Run(u.name, func(t *testing.T) {
			v, err := kernel.NewResources().Variable("w", tensor.Float32, tensor.MakeShape(3))
			if err != nil {
				t.Fatal(err)
			}
			if err := v.Assign(tensor.MustFromSlice([]float32{1, 2, 3}, 3)); err != nil {
				t.Fatal(err)
			}
			held, lease, err := v.Share()
			if err != nil {
				t.Fatal(err)
			}
			if err := u.update(v); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(held.Float32s(), []float32{1, 2, 3}) {
				t.Fatalf("a shared value changed under an update: %v", held.Float32s())
			}
			now, l2, _ := v.Share()
			if now.Float32s()[0] != u.want || &now.Float32s()[0] == &held.Float32s()[0] {
				t.Fatalf("after the update: %v (same buffer %v), want element 0 = %v in another buffer",
					now.Float32s(), &now.Float32s()[0] == &held.Float32s()[0], u.want)
			}
			lease.Release() // the old buffer is free: it becomes the spare
			l2.Release()    // the current one is unshared: updates run in place
			cur := &now.Float32s()[0]
			if err := u.update(v); err != nil {
				t.Fatal(err)
			}
			after, l3, _ := v.Share()
			defer l3.Release()
			if &after.Float32s()[0] != cur {
				t.Errorf("an update of an unshared variable moved it to another buffer")
			}
			// Shared again: the next update takes the released buffer.
			if u.name == "Update" || u.name == "LockValue" {
				if err := u.update(v); err != nil {
					t.Fatal(err)
				}
				moved, l4, _ := v.Share()
				defer l4.Release()
				if &moved.Float32s()[0] != &held.Float32s()[0] {
					t.Errorf("a copy-on-write did not reuse the released buffer")
				}
				if after.Float32s()[0] != 21 || moved.Float32s()[0] != 31 {
					t.Errorf("values %v then %v, want 21 then 31", after.Float32s(), moved.Float32s())
				}
			}
		})
	}
}

// TestVariableSharesUnderConcurrentUpdates runs readers beside updaters
// (run it with -race): every value a reader holds stays a consistent
// snapshot (all elements equal) until it releases it.
func TestVariableSharesUnderConcurrentUpdates(t *testing.T) {
	v, err := kernel.NewResources().Variable("w", tensor.Float32, tensor.MakeShape(256))
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Assign(tensor.New(tensor.Float32, 256)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				if w%2 == 0 {
					val, err := v.LockValue()
					if err != nil {
						errs <- err.Error()
						return
					}
					for i := range val.Float32s() {
						val.Float32s()[i]++
					}
					v.UnlockValue()
					continue
				}
				held, lease, err := v.Share()
				if err != nil {
					errs <- err.Error()
					return
				}
				d := held.Float32s()
				first := d[0]
				for _, x := range d {
					if x != first {
						errs <- "a reader saw a half-applied update"
						lease.Release()
						return
					}
				}
				lease.Release()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	final, _ := v.Read()
	if got := final.Float32s()[0]; got != 1000 {
		t.Errorf("after 1000 updates the value is %v", got)
	}
}
