// Package rendezvoustest is the conformance suite of kernel.Rendezvous:
// every implementation runs it (rendezvous.Local and the worker's router
// do, in package rendezvous's tests).
//
//	func TestLocal(t *testing.T) {
//		rendezvoustest.Test(t, func(t *testing.T) (kernel.Rendezvous, func(error)) {
//			l := rendezvous.NewLocal()
//			return l, l.Abort
//		})
//	}
package rendezvoustest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/rendezvous"
	"github.com/distflow/distflow/tensor"
)

// Test runs the suite. newRV returns a fresh rendezvous of one step and the
// function that aborts it with a reason.
func Test(t *testing.T, newRV func(t *testing.T) (kernel.Rendezvous, func(error))) {
	key := func(name string) string {
		return rendezvous.Key("/job:worker/task:0/cpu:0", "/job:worker/task:0/cpu:0", name)
	}
	val := tensor.MustFromSlice([]float32{1, 2}, 2)
	t.Run("send then recv", func(t *testing.T) {
		rv, _ := newRV(t)
		if err := rv.Send(key("a:0"), val); err != nil {
			t.Fatal(err)
		}
		got, err := rv.Recv(context.Background(), key("a:0"))
		if err != nil || got != val {
			t.Fatalf("Recv = %v, %v; want the sent tensor", got, err)
		}
	})
	t.Run("recv waits for send", func(t *testing.T) {
		rv, _ := newRV(t)
		done := make(chan error, 1)
		go func() {
			got, err := rv.Recv(context.Background(), key("b:0"))
			if err == nil && got != val {
				err = fmt.Errorf("got %v, want the sent tensor", got)
			}
			done <- err
		}()
		if err := rv.Send(key("b:0"), val); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
	t.Run("send twice", func(t *testing.T) {
		rv, _ := newRV(t)
		if err := rv.Send(key("c:0"), val); err != nil {
			t.Fatal(err)
		}
		if err := rv.Send(key("c:0"), val); err == nil {
			t.Fatal("a second Send of one key succeeded")
		}
	})
	t.Run("recv cancelled", func(t *testing.T) {
		rv, _ := newRV(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := rv.Recv(ctx, key("d:0")); !errors.Is(err, context.Canceled) {
			t.Fatalf("Recv with a cancelled context: %v, want context.Canceled", err)
		}
	})
	t.Run("abort ends waits", func(t *testing.T) {
		rv, abort := newRV(t)
		reason := errors.New("the step failed")
		done := make(chan error, 1)
		go func() {
			_, err := rv.Recv(context.Background(), key("e:0"))
			done <- err
		}()
		abort(reason)
		err := <-done
		if !errors.Is(err, rendezvous.ErrAborted) || !errors.Is(err, reason) {
			t.Fatalf("Recv after abort: %v, want ErrAborted and the reason", err)
		}
		if err := rv.Send(key("f:0"), val); !errors.Is(err, rendezvous.ErrAborted) {
			t.Fatalf("Send after abort: %v, want ErrAborted", err)
		}
	})
	t.Run("many keys concurrently", func(t *testing.T) {
		rv, _ := newRV(t)
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for i := range 32 {
			k := key(fmt.Sprintf("g%d:0", i))
			wg.Add(2)
			go func() {
				defer wg.Done()
				if _, err := rv.Recv(context.Background(), k); err != nil {
					errs <- err
				}
			}()
			go func() {
				defer wg.Done()
				if err := rv.Send(k, val); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}
