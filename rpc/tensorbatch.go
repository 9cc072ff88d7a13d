package rpc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/distflow/distflow/rendezvous"
	"github.com/distflow/distflow/service"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/worker"
)

// Batches on the tensor channel (version 1.1, method 3, RecvTensors): a
// worker asks a peer for all the tensors a step's partition receives from
// it in one request (service.BatchReceiver), and the peer answers each
// key, by its index, as its tensor is sent, writing those ready at the
// same time together:
//
//	request body: u16 keys | (u16 n | key)...
//	response:     u8 4 | u16 index | u8 dtype | u8 rank | u64 dims... | u64 byte length | the bytes
//	          or: u8 5 | u16 index | u32 status code | u16 n | reason | u32 n | message
//	          or: u8 1 | ... (an error of the whole request, as for RecvTensor)
//
// until every index is answered. A remote step then costs one request per
// peer and about one response per wave of tensors (a ps's parameters are
// sent at once), instead of a round trip per tensor.

// maxBatchKeys bounds the keys of one batch.
const maxBatchKeys = 1 << 12

// appendKeys appends a batch request's body.
func appendKeys(b []byte, keys []string) []byte {
	b = binary.LittleEndian.AppendUint16(b, uint16(len(keys)))
	for _, k := range keys {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(k)))
		b = append(b, k...)
	}
	return b
}

// parseKeys reads a batch request's body, appending its keys to keys.
// The keys are substrings of one string, which it returns: prev when the
// keys' bytes are prev's (a connection's previous batch: a step asks a
// peer for the same keys at every step), else a new one.
func parseKeys(body []byte, keys []string, prev string) ([]string, string, error) {
	f := frame{b: body}
	n := f.u16()
	if n == 0 || n > maxBatchKeys || n*2 > len(f.b) {
		return keys, "", fmt.Errorf("%w: a batch of %d keys in %d bytes", errShortFrame, n, len(body))
	}
	// One string holds them all: at most one allocation per batch, not
	// one per key.
	all := prev
	if string(f.b) != prev { // compared in place, without a copy
		all = string(f.b)
	}
	for range n {
		k := len(f.next(f.u16()))
		at := len(all) - len(f.b) - k
		keys = append(keys, all[at:at+k])
	}
	return keys, all, f.err
}

// lent is one answered key of a batch on the server.
type lent struct {
	i       int
	t       *tensor.Tensor
	release func()
	err     error
}

// serveBatch answers rs's RecvTensors request; an error means the
// connection is broken.
func (s *Server) serveBatch(ctx context.Context, rs *responder, w worker.Service) error {
	ctx, err := s.opts.admit(ctx, recvTensorMethod)
	if err == nil {
		var all string
		if rs.keys, all, err = parseKeys(rs.req.body, rs.keys[:0], rs.lastKeys); err == nil {
			rs.lastKeys = ""
			if len(all) <= maxReusedRequest {
				rs.lastKeys = all
			}
			err = s.serveKeys(ctx, rs, w)
			// The worker keeps no key past its call (nor the slice, per
			// Go's custom), so the slice serves the next batch.
			clear(rs.keys)
			rs.keys = rs.keys[:0]
			return err
		}
	}
	rs.hdr = appendError(append(rs.hdr, respError), err)
	rs.bufs = append(rs.bufs, rs.hdr)
	return rs.write(ctx)
}

// lentPart is one answered key of a wave of serveLent: its header in
// rs.hdr, and its bytes after it, if not in hdr.
type lentPart struct {
	start, end int
	raw        []byte
}

// serveLent answers rs's batch with w's LendTensors: one waiter, and the
// tensors sent together written together (by sendLent).
func (s *Server) serveLent(ctx context.Context, rs *responder, bl worker.BatchLender) error {
	keys := rs.keys
	rs.answered = append(rs.answered[:0], make([]bool, len(keys))...)
	rs.lendCtx, rs.werr = ctx, nil
	if rs.got == nil {
		rs.got = rs.sendLent // one method value for all the connection's batches
	}
	err := bl.LendTensors(ctx, rs.req.step, keys, rs.got)
	werr := rs.werr
	rs.lendCtx, rs.werr = nil, nil
	if werr != nil {
		return werr
	}
	if err != nil { // the keys not lent end with the wait's error
		rs.hdr = rs.hdr[:0]
		for i, done := range rs.answered {
			if !done {
				rs.hdr = binary.LittleEndian.AppendUint16(append(rs.hdr, respBatchError), uint16(i))
				rs.hdr = appendError(rs.hdr, err)
			}
		}
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sniffTimeout)
		defer cancel()
		rs.bufs = append(rs.bufs, rs.hdr)
		if werr := rs.write(wctx); werr != nil {
			return werr
		}
	}
	return nil
}

// sendLent writes a wave of serveLent's tensors, lent together, in one
// writev; a failed write is kept in rs.werr.
func (rs *responder) sendLent(ready []rendezvous.Lent) {
	if rs.werr != nil {
		for _, r := range ready {
			r.Release()
		}
		return
	}
	s := rs.s
	rs.hdr, rs.parts = rs.hdr[:0], rs.parts[:0]
	for _, r := range ready {
		p := lentPart{start: len(rs.hdr)}
		if r.T.Rank() > maxRank {
			rs.hdr = binary.LittleEndian.AppendUint16(append(rs.hdr, respBatchError), uint16(r.Index))
			rs.hdr = appendError(rs.hdr, fmt.Errorf("rpc: tensor %q of rank %d: the tensor channel moves at most rank %d", rs.keys[r.Index], r.T.Rank(), maxRank))
		} else {
			rs.hdr = binary.LittleEndian.AppendUint16(append(rs.hdr, respBatchTensor), uint16(r.Index))
			rs.hdr = appendTensorHeader(rs.hdr, r.T)
			if raw := r.T.RawBytes(); s.tlsc != nil && len(raw) <= tlsCoalesceBytes {
				rs.hdr = append(rs.hdr, raw...) // one TLS record with its header
			} else {
				p.raw = raw
			}
			s.countServed(rs.lendCtx, len(r.T.RawBytes()))
		}
		p.end = len(rs.hdr)
		rs.parts = append(rs.parts, p)
		rs.answered[r.Index] = true
	}
	for _, p := range rs.parts { // hdr no longer grows
		rs.bufs = append(rs.bufs, rs.hdr[p.start:p.end])
		if len(p.raw) > 0 {
			rs.bufs = append(rs.bufs, p.raw)
		}
	}
	clear(rs.parts) // not to keep a tensor's memory
	rs.werr = rs.write(rs.lendCtx)
	for _, r := range ready {
		r.Release() // written or failed: the socket has what it took
	}
}

// serveKeys answers rs's batch of keys (rs.keys).
func (s *Server) serveKeys(ctx context.Context, rs *responder, w worker.Service) error {
	if bl, ok := w.(worker.BatchLender); ok {
		return s.serveLent(ctx, rs, bl)
	}
	step, keys := rs.req.step, rs.keys
	results := make(chan lent, len(keys))
	for i, k := range keys {
		go func() {
			t, release, err := s.lend(ctx, w, step, k)
			results <- lent{i, t, release, err}
		}()
	}
	var (
		ready []lent
		spans []int // hdr[spans[2j]:spans[2j+1]] precedes ready[j]'s bytes
	)
	for left := len(keys); left > 0; {
		ready, spans, rs.hdr = append(ready[:0], <-results), spans[:0], rs.hdr[:0]
	more:
		for {
			select {
			case r := <-results:
				ready = append(ready, r)
			default:
				break more
			}
		}
		left -= len(ready)
		for _, r := range ready {
			start := len(rs.hdr)
			if r.err != nil {
				rs.hdr = binary.LittleEndian.AppendUint16(append(rs.hdr, respBatchError), uint16(r.i))
				rs.hdr = appendError(rs.hdr, r.err)
			} else {
				rs.hdr = binary.LittleEndian.AppendUint16(append(rs.hdr, respBatchTensor), uint16(r.i))
				rs.hdr = appendTensorHeader(rs.hdr, r.t)
				if raw := r.t.RawBytes(); s.tlsc != nil && len(raw) <= tlsCoalesceBytes {
					rs.hdr = append(rs.hdr, raw...) // one TLS record with its header
				}
			}
			spans = append(spans, start, len(rs.hdr))
		}
		for j, r := range ready {
			rs.bufs = append(rs.bufs, rs.hdr[spans[2*j]:spans[2*j+1]])
			if r.err != nil {
				continue
			}
			if raw := r.t.RawBytes(); len(raw) > 0 && !(s.tlsc != nil && len(raw) <= tlsCoalesceBytes) {
				rs.bufs = append(rs.bufs, raw)
			}
		}
		err := rs.write(ctx)
		for _, r := range ready {
			if r.release != nil {
				r.release() // written or failed: the socket has what it took
			}
		}
		if err != nil {
			go func() { // the keys still waited for end with ctx
				for ; left > 0; left-- {
					if r := <-results; r.release != nil {
						r.release()
					}
				}
			}()
			return err
		}
	}
	return nil
}

// RecvTensors receives a batch over the tensor channel
// (service.BatchReceiver); service.ErrNoBatch when the peer does not offer
// version 1.1 of the channel.
func (c *workerClient) RecvTensors(ctx context.Context, stepID int64, keys []string, deliver func(i int, t *tensor.Tensor, err error)) error {
	if c.tensors == nil || len(keys) == 0 || len(keys) > maxBatchKeys {
		return service.ErrNoBatch
	}
	if err := c.wait(ctx); err != nil {
		return service.ErrNoBatch // RecvTensor reports it
	}
	return c.tensors.recvBatch(ctx, stepID, keys, deliver)
}

// recvBatch is RecvTensors on p's peer.
func (p *tensorPool) recvBatch(ctx context.Context, step int64, keys []string, deliver func(i int, t *tensor.Tensor, err error)) error {
	p.mu.Lock()
	v10 := p.v10
	p.mu.Unlock()
	size := 2
	for _, k := range keys {
		size += 2 + len(k)
	}
	if v10 || size > maxCallBody {
		return service.ErrNoBatch
	}
	var md map[string]string
	if pc := p.opts.PerRPCCredentials; pc != nil {
		if pc.RequireTransportSecurity() && p.tlsc == nil {
			return service.ErrNoBatch // RecvTensor reports the misconfiguration
		}
		var err error
		if md, err = pc.GetRequestMetadata(ctx, "https://"+p.addr+path.Dir(recvTensorMethod)); err != nil {
			return service.ErrNoBatch
		}
	}
	c, err := p.get(ctx)
	if err != nil {
		if err := p.dialError(ctx, "RecvTensor", fmt.Sprintf("%d tensors of step %d", len(keys), step), err); !errors.Is(err, errFallback) {
			return err
		}
		return service.ErrNoBatch
	}
	if !c.v11 {
		p.put(c)
		return service.ErrNoBatch
	}
	err = p.exchangeBatch(ctx, c, step, keys, md, deliver)
	re, remote := asRemote(err)
	if err == nil || remote {
		p.put(c)
		if re != nil && re.Code == codes.Unimplemented {
			return service.ErrNoBatch // an older peer: nothing was asked
		}
		return err
	}
	c.conn.Close()
	return p.callError(ctx, "RecvTensor", fmt.Sprintf("%d tensors of step %d", len(keys), step), err)
}

// exchangeBatch sends a batch request on c and delivers its answers; a
// *RemoteError is the peer's refusal of the whole request, after which c
// is still usable.
func (p *tensorPool) exchangeBatch(ctx context.Context, c *tensorClientConn, step int64, keys []string, md map[string]string, deliver func(i int, t *tensor.Tensor, err error)) error {
	timeout, err := c.arm(ctx)
	if err != nil {
		return err
	}
	defer c.disarm()
	var start int
	c.buf, start = beginRequest(c.buf[:0], methodRecvTensors, step, timeout, "", md)
	c.buf = endRequest(appendKeys(c.buf, keys), start)
	begin := time.Now()
	if _, err := c.conn.Write(c.buf); err != nil {
		return err
	}
	answered := make([]bool, len(keys))
	for left := len(keys); left > 0; left-- {
		kind, err := p.readKind(c, "RecvTensor")
		if err != nil {
			return err
		}
		if _, err := io.ReadFull(c.r, c.scratch[:2]); err != nil {
			return err
		}
		i := int(binary.LittleEndian.Uint16(c.scratch[:2]))
		if i >= len(keys) || answered[i] || kind != respBatchTensor && kind != respBatchError {
			return fmt.Errorf("%w: batch answer of kind %d for key %d of %d", tensor.ErrCorrupt, kind, i, len(keys))
		}
		answered[i] = true
		if kind == respBatchError {
			re, err := p.readError(c, "RecvTensor")
			if err != nil {
				return err
			}
			deliver(i, nil, re)
			continue
		}
		t, err := p.readTensor(c)
		if err != nil {
			return err
		}
		p.countReceived(time.Since(begin), len(c.buf)/len(keys), 8*t.Rank()+13, len(t.RawBytes()))
		deliver(i, t, nil)
	}
	return nil
}
