package rpc

import "github.com/distflow/distflow/worker"

// TensorChannelState reports, for a client made by DialWorker, how many
// tensor-channel connections sit idle in its pool and whether its peer is
// taken not to offer the channel.
func TensorChannelState(w worker.Service) (idle int, offline bool) {
	p := w.(*workerClient).tensors
	if p == nil {
		return 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle), !p.offline.IsZero()
}
