package rpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/distflow/distflow/internal/race"
	"github.com/distflow/distflow/rendezvous"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/worker"
)

// lendingWorker lends the same tensor for every key, allocating nothing.
type lendingWorker struct {
	worker.Service // nil: only lending is served
	t              *tensor.Tensor
	ready          []rendezvous.Lent
}

func (w *lendingWorker) LendTensor(context.Context, int64, string) (*tensor.Tensor, func(), error) {
	return w.t, func() {}, nil
}

func (w *lendingWorker) LendTensors(_ context.Context, _ int64, keys []string, got func([]rendezvous.Lent)) error {
	got(w.ready[:len(keys)])
	return nil
}

// TestServeRequestAllocs checks what a server connection allocates to
// read and answer a step's requests once its buffers have grown: the
// request's key (RecvTensor); nothing for a batch whose keys are the
// previous batch's (the same at every step), one string for new ones.
func TestServeRequestAllocs(t *testing.T) {
	if race.Enabled {
		t.Skip("allocation counts do not hold under the race detector (sync.Pool drops items at random)")
	}
	tn := tensor.MustFromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	w := &lendingWorker{t: tn, ready: []rendezvous.Lent{{Index: 0, T: tn, Release: func() {}}, {Index: 1, T: tn, Release: func() {}}}}
	keys := []string{"/job:ps/task:0/cpu:0;/job:worker/task:0/cpu:0;w:0", "/job:ps/task:0/cpu:0;/job:worker/task:0/cpu:0;b:0"}
	batch, start := beginRequest(nil, methodRecvTensors, 7, 0, "", nil)
	batch = endRequest(appendKeys(batch, keys), start)
	other, start := beginRequest(nil, methodRecvTensors, 7, 0, "", nil)
	other = endRequest(appendKeys(other, []string{keys[1], keys[0]}), start)
	single, start := beginRequest(nil, methodRecvTensor, 7, 0, keys[0], nil)
	single = endRequest(single, start)
	timed, start := beginRequest(nil, methodRecvTensors, 7, time.Minute, "", nil)
	timed = endRequest(appendKeys(timed, keys), start)

	// A TCP connection, not net.Pipe, whose write deadlines allocate.
	srv := discardingConn(t) // the client reads and drops the answers
	connCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rs := newResponder(&Server{}, srv, connCtx, methodContexts(connCtx))
	for _, tc := range []struct {
		name     string
		requests [][]byte // served in turn
		want     float64
	}{
		{"RecvTensors", [][]byte{batch}, 0},
		{"RecvTensors/new keys", [][]byte{batch, other}, 1},
		{"RecvTensor", [][]byte{single}, 1},
		// context.WithTimeout's (the context, its timer and two funcs),
		// and no Done channel: the answer's write needs no watch.
		{"RecvTensors/deadline", [][]byte{timed}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := bytes.NewReader(nil)
			r := bufio.NewReader(src)
			next := 0
			serve := func() {
				src.Reset(tc.requests[next%len(tc.requests)])
				next++
				r.Reset(src)
				var err error
				if rs.in, err = readRequestInto(r, true, &rs.req, rs.in); err != nil {
					t.Fatal(err)
				}
				if err := rs.s.serveRequest(rs, w); err != nil {
					t.Fatal(err)
				}
				rs.done()
			}
			if n := testing.AllocsPerRun(100, serve); n != tc.want {
				t.Errorf("%v allocations per request, want %v", n, tc.want)
			}
		})
	}
}

// TestExchangeAllocs checks that receiving tensors on a client connection
// allocates the tensors and nothing else under a context that never ends,
// and the watch of one that can end besides.
func TestExchangeAllocs(t *testing.T) {
	if race.Enabled {
		t.Skip("allocation counts do not hold under the race detector (sync.Pool drops items at random)")
	}
	tn := tensor.MustFromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	perTensor := testing.AllocsPerRun(100, func() { tensor.New(tensor.Float32, 2, 3) })
	answer := func(i int) []byte {
		b := binary.LittleEndian.AppendUint16([]byte{respBatchTensor}, uint16(i))
		return append(b, appendTensorResponse(nil, tn)[1:]...) // without respTensor's kind
	}
	batch := append(answer(1), answer(0)...)
	single := appendTensorResponse(nil, tn)

	p := &tensorPool{addr: "test:1", peer: "test"}
	src := bytes.NewReader(nil)
	c := &tensorClientConn{conn: fuzzConn{}, r: bufio.NewReader(src), v11: true}
	ctx := context.Background()
	keys := []string{"w:0", "b:0"}
	deliver := func(_ int, _ *tensor.Tensor, err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		src.Reset(single)
		c.r.Reset(src)
		if _, err := p.exchange(ctx, c, 7, keys[0], nil); err != nil {
			t.Fatal(err)
		}
	}); n != perTensor {
		t.Errorf("RecvTensor: %v allocations, want %v (the tensor's)", n, perTensor)
	}
	if n := testing.AllocsPerRun(100, func() {
		src.Reset(batch)
		c.r.Reset(src)
		if err := p.exchangeBatch(ctx, c, 7, keys, nil, deliver); err != nil {
			t.Fatal(err)
		}
	}); n != 2*perTensor {
		t.Errorf("RecvTensors: %v allocations, want %v (the tensors')", n, 2*perTensor)
	}

	// A context that can end is watched during the exchange (see arm):
	// context.AfterFunc's 2, the context's Done channel and children
	// being made at its first watch.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if n := testing.AllocsPerRun(100, func() {
		src.Reset(batch)
		c.r.Reset(src)
		if err := p.exchangeBatch(ctx, c, 7, keys, nil, deliver); err != nil {
			t.Fatal(err)
		}
	}); n != 2*perTensor+2 {
		t.Errorf("RecvTensors under a context that can end: %v allocations, want %v (the tensors' and the watch's 2)", n, 2*perTensor+2)
	}
}

// TestIdleProbeAllocs checks that looking at an idle connection taken
// from the pool allocates nothing.
func TestIdleProbeAllocs(t *testing.T) {
	if race.Enabled {
		t.Skip("allocation counts do not hold under the race detector (sync.Pool drops items at random)")
	}
	conn := discardingConn(t)
	var probe idleProbe
	if !probe.open(conn) {
		t.Fatal("an open connection is taken for closed")
	}
	if n := testing.AllocsPerRun(100, func() { probe.open(conn) }); n != 0 {
		t.Errorf("%v allocations per look, want 0", n)
	}
}

// discardingConn returns a loopback TCP connection whose other end reads
// and drops whatever is written; both close when the test ends.
func discardingConn(t *testing.T) net.Conn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		if c, err := lis.Accept(); err == nil {
			defer c.Close()
			io.Copy(io.Discard, c)
		}
	}()
	conn, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
