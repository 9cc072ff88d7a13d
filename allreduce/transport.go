package allreduce

import (
	"context"
	"errors"
)

// errPeerLeft is a probe's answer from a peer whose ring is closed.
var errPeerLeft = errors.New("allreduce: the peer closed its ring")

// transport moves the chunks of one operation from a rank to the next. The
// receiving side files what arrives in the receiving Ring's mailbox
// (deliver) and reports a stream that breaks mid-operation (fail), so that
// the algorithm is the same over gRPC and in process.
type transport interface {
	// open starts the stream of operation key to rank to.
	open(ctx context.Context, to int, key opKey) (stream, error)
	// probe reports whether rank to answers (nil), has closed its ring
	// (errPeerLeft: its process is alive, leaving after a failure or the
	// end of training) or is down, without waiting for a peer that is not
	// serving.
	probe(ctx context.Context, to int) error
}

// stream sends the chunks of one operation in order.
type stream interface {
	// send sends c. c.data may be rewritten once send returns: a
	// transport that delivers later copies it.
	send(c *chunk) error
	// close ends the stream after its last chunk, waiting for the peer to
	// have taken them all.
	close() error
	// abort ends the stream after a failure.
	abort()
	// broken is closed when the stream fails while the sender may be
	// idle (the peer died): waiting for the next chunk to forward stops.
	broken() <-chan struct{}
}
