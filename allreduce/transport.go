package allreduce

import (
	"context"
	"errors"
	"fmt"
)

// ErrPeerLeft is a probe's answer from a peer whose process is alive but
// whose ring is closed (it is leaving, after a failure or at the end of
// training): Transport.Probe returns it, wrapped or not, so that the peer
// is not reported as down.
var ErrPeerLeft = errors.New("allreduce: the peer closed its ring")

// Op identifies one all-reduce operation: concurrent calls (different
// names) and successive calls (different rounds) never mix.
type Op struct {
	Name  string
	Round int64
}

// String is used in errors: "grads" round 3.
func (o Op) String() string { return fmt.Sprintf("%q round %d", o.Name, o.Round) }

// Chunk is a piece of one operation's tensor on its way from a rank to
// the next.
type Chunk struct {
	Op Op
	// From is the sending rank and Size the number of ranks of its ring.
	From, Size int
	// Index is the chunk's position in the sequence the sender sends for
	// Op: the receiver takes chunks in that order, whatever order they
	// arrive in.
	Index int
	// Length is the number of elements of the whole tensor, Offset the
	// position of Data in it.
	Length, Offset int
	Data           []float32
}

// Transport carries one rank's chunks to the other ranks of its ring, and
// delivers the chunks that arrive for the rank to its Receiver (how it is
// given the Receiver is the implementation's business: see NewMemNetwork,
// and rpc.RegisterRing for the gRPC one). Every implementation passes the
// conformance suite of package allreducetest. Ranks are positions in
// Config.Peers. A Transport is used by one Ring, which closes it.
//
// A Transport must be safe for concurrent use: a ring opens one stream per
// running operation.
type Transport interface {
	// Open starts the stream of operation op's chunks to rank to. A peer
	// that is not reachable yet (still starting) is waited for until ctx
	// ends; when ctx ends, the error is (or wraps) ctx.Err(). A peer that
	// is gone is not waited for: one that answered this transport before
	// and now refuses connections (its process has exited, its port is
	// closed) fails Open at once, with an error that wraps
	// ErrPeerUnreachable.
	Open(ctx context.Context, to int, op Op) (Stream, error)
	// Probe reports whether rank to is alive: nil when it answers,
	// ErrPeerLeft when its process answers that its ring is closed, and
	// another error when it is down. It does not wait for a peer that
	// refuses connections; one that does not answer is waited for until
	// ctx ends.
	Probe(ctx context.Context, to int) error
	// Close releases the transport's connections. The ring's streams are
	// over by then.
	Close() error
}

// Stream sends the chunks of one operation to one rank, in order. Its
// methods are called from one goroutine, except Broken.
type Stream interface {
	// Send sends c. c.Data may be rewritten once Send returns: a transport
	// that delivers later copies it. A failure is final: the ring then
	// calls Abort.
	Send(c *Chunk) error
	// Close ends the stream after its last chunk and waits for the peer
	// to have taken them all in (filed them with its Receiver).
	Close() error
	// Abort ends the stream after a failure: the peer's Receiver is told
	// that the operation's incoming stream broke (Receiver.Fail).
	Abort()
	// Broken is closed when the stream fails while the sender may be
	// idle (the peer died): the ring then stops waiting for the next
	// chunk to forward and calls Close, whose error says why.
	Broken() <-chan struct{}
}

// Receiver is the receiving end of a rank: its Transport files there the
// chunks that arrive from the previous rank. *Ring implements it. Its
// methods are safe for concurrent use.
type Receiver interface {
	// Deliver files c for its operation, possibly before the operation has
	// started locally; the Receiver keeps c. Chunks of operations that
	// have finished are dropped. It fails with ErrClosed once the ring is
	// closed, and with an error wrapping ErrMismatch for a chunk that is
	// malformed; the transport then ends the stream with that error.
	Deliver(c *Chunk) error
	// Fail makes operation op fail with err: its incoming stream from rank
	// from (the sender of its chunks) broke.
	Fail(op Op, from int, err error)
	// Err returns ErrClosed once the ring is closed (a transport answers
	// probes with ErrPeerLeft then), nil before.
	Err() error
}
