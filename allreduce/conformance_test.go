package allreduce_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/distflow/distflow/allreduce"
	"github.com/distflow/distflow/allreduce/allreducetest"
)

// memNetwork connects the ranks through an allreduce.MemNetwork.
func memNetwork(delay time.Duration) allreducetest.Network {
	return func(t testing.TB, recv []allreduce.Receiver) []allreducetest.Peer {
		net := allreduce.NewMemNetwork(recv, delay)
		peers := make([]allreducetest.Peer, len(recv))
		for i := range peers {
			peers[i] = allreducetest.Peer{Transport: net.Transport(i), Addr: fmt.Sprintf("memory:%d", i), Kill: func() { net.Cut(i) }}
		}
		return peers
	}
}

func TestMemNetwork(t *testing.T) { allreducetest.Run(t, memNetwork(0)) }

// A network that delays every chunk still sums right, and still names a
// dead peer.
func TestMemNetworkDelayed(t *testing.T) { allreducetest.Run(t, memNetwork(200*time.Microsecond)) }
