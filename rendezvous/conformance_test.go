package rendezvous_test

import (
	"testing"

	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/rendezvous"
	"github.com/distflow/distflow/rendezvous/rendezvoustest"
)

func TestLocalConformance(t *testing.T) {
	rendezvoustest.Test(t, func(t *testing.T) (kernel.Rendezvous, func(error)) {
		l := rendezvous.NewLocal()
		return l, l.Abort
	})
}

func TestRouterConformance(t *testing.T) {
	rendezvoustest.Test(t, func(t *testing.T) (kernel.Rendezvous, func(error)) {
		l := rendezvous.NewLocal()
		return rendezvous.NewRouter(l, "/job:worker/task:0", nil), l.Abort
	})
}
