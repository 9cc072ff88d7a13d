package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/distflow/distflow/internal/stepctx"
	"github.com/distflow/distflow/tensor"
)

// Sentinel errors callers test with errors.Is.
var (
	// ErrAborted is wrapped by every error of an aborted rendezvous: waiters
	// woken by Abort and later Sends and Recvs.
	ErrAborted = errors.New("rendezvous aborted")
	// ErrStepDone is wrapped by errors about a step whose rendezvous was
	// already cleaned up (a late RecvTensor of a finished step).
	ErrStepDone = errors.New("step already cleaned up")
	// ErrDuplicateSend is wrapped when a key is sent twice before it is
	// received.
	ErrDuplicateSend = errors.New("key sent twice")
)

// Key returns the rendezvous key of a tensor moving from sendDevice to
// recvDevice: "sendDevice;recvDevice;tensorName", for example
// "/job:ps/task:0/cpu:0;/job:worker/task:1/cpu:0;w:0". Both sides of a
// Send/Recv pair compute it from the same attributes.
func Key(sendDevice, recvDevice, tensorName string) string {
	return sendDevice + ";" + recvDevice + ";" + tensorName
}

// ParseKey splits a key made by Key. It fails, naming the key, if one of the
// three parts is missing or empty.
func ParseKey(key string) (sendDevice, recvDevice, tensorName string, err error) {
	// Cut, not SplitN: a remote Recv parses its key at every step.
	sendDevice, rest, ok1 := strings.Cut(key, ";")
	recvDevice, tensorName, ok2 := strings.Cut(rest, ";")
	if !ok1 || !ok2 || sendDevice == "" || recvDevice == "" || tensorName == "" {
		return "", "", "", fmt.Errorf("rendezvous: malformed key %q: want send_device;recv_device;tensor_name", key)
	}
	return sendDevice, recvDevice, tensorName, nil
}

// Local is the rendezvous of one step within one process: a table from key
// to either a sent tensor or a waiting receiver. It is safe for concurrent
// use.
//
// Send never blocks; Recv blocks until the key is sent, its context ends or
// the rendezvous is aborted. Each key carries one tensor from one Send to one
// Recv: Recv removes the entry, so after a completed exchange the key may be
// used again (for example by the next step, if a Local is reused). The
// tensor is handed over, not copied: senders must not modify it afterwards.
type Local struct {
	mu      sync.Mutex
	items   itemTable
	err     error         // set by Abort; every later operation fails with it
	aborted chan struct{} // closed by Abort; made by the first waiter (abortedLocked)
	onAbort []*abortFunc  // see afterAbort

	// The common case allocates nothing more: a step's router registers
	// one abort function, and a finished step's abort error is kept here.
	onAbortBuf [1]*abortFunc
	done       stepDone
	// Room for the first items, which a step's Local holds a few of.
	itemBuf   [2]localItem
	itemsUsed int
	many      manyWait // the first RecvManyLent's: a step's Local lends to one peer
	manyUsed  bool
}

// abortFunc is a function to call when a Local is aborted (afterAbort),
// or a context to cancel then (a Router's, without a func value).
type abortFunc struct {
	f   func()
	ctx *stepctx.Context
}

func (a *abortFunc) call() {
	if a.ctx != nil {
		a.ctx.Cancel(nil)
		return
	}
	a.f()
}

// localItem is either a sent tensor waiting for its receiver (sent) or a
// receiver waiting for its tensor, which Send wakes: a Recv's by closing
// ready, a RecvManyLent's (whose ready is nil) through its many, which
// Abort wakes too.
type localItem struct {
	t       *tensor.Tensor
	release func() // see SendLent; nil for Send
	sent    bool
	ready   chan struct{}
	many    *manyWait // a RecvManyLent's
}

// NewLocal returns an empty rendezvous.
func NewLocal() *Local {
	return &Local{}
}

// newItemLocked returns a new, empty item; l.mu is held. Items are not
// reused: a waiter may still hold one it was woken from.
func (l *Local) newItemLocked() *localItem {
	if l.itemsUsed < len(l.itemBuf) {
		l.itemsUsed++
		return &l.itemBuf[l.itemsUsed-1]
	}
	return new(localItem)
}

// closedChan is the Done channel of a Local aborted before anything asked
// for it.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// abortedLocked returns the channel Abort closes; l.mu is held.
func (l *Local) abortedLocked() <-chan struct{} {
	if l.aborted == nil {
		l.aborted = make(chan struct{})
	}
	return l.aborted
}

// Send makes t available under key and wakes its receiver, if one waits. It
// never blocks. It fails if key was already sent and not yet received, or if
// the rendezvous is aborted.
func (l *Local) Send(key string, t *tensor.Tensor) error { return l.SendLent(key, t, nil) }

// SendLent is Send of a tensor that its sender lends: release (if not nil)
// may be called once no one reads t any more, by a receiver that takes it
// with RecvLent. A receiver that takes it with Recv, a tensor never
// received, and an aborted rendezvous leave it uncalled.
func (l *Local) SendLent(key string, t *tensor.Tensor, release func()) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return fmt.Errorf("rendezvous: send %q: %w", key, l.err)
	}
	it, ok := l.items.get(key)
	if !ok {
		it = l.newItemLocked()
		it.t, it.release, it.sent = t, release, true
		l.items.put(key, it)
		return nil
	}
	if it.sent {
		return fmt.Errorf("rendezvous: send %q: %w", key, ErrDuplicateSend)
	}
	it.t, it.release, it.sent = t, release, true
	if it.ready != nil {
		close(it.ready)
	}
	if it.many != nil {
		it.many.wakeLocked()
	}
	return nil
}

// Lent is a tensor received by RecvManyLent: the index of its key, and the
// function to call once the caller no longer reads it (see RecvLent).
type Lent struct {
	Index   int
	T       *tensor.Tensor
	Release func()
}

// RecvManyLent receives the tensors sent under keys, as RecvLent would
// each, as they come: got is called with those sent since its last call
// (each key once, in no set order), one call at a time on the caller's
// goroutine, and RecvManyLent returns once every key was received. It
// fails as Recv does (ctx, abort, another receiver of a key), the keys not
// yet received then not. One waiter serves all the keys, so that a batch
// of a step's tensors costs no goroutine per tensor. got must not keep
// the slice it is given: it is reused.
func (l *Local) RecvManyLent(ctx context.Context, keys []string, got func([]Lent)) error {
	// The waiter's wake-up, and the tensors ready for got and the
	// receivers of the keys that must wait: the Local's own, or one
	// allocation, for a few keys.
	pending := make(map[string]*localItem, len(keys))
	index := make(map[string]int, len(keys))
	l.mu.Lock()
	m := &l.many
	if l.manyUsed { // not reused: a waker may still hold it
		m = new(manyWait)
	}
	l.manyUsed = true
	m.l, m.cond.L = l, &l.mu
	var ready []Lent
	var waiters []localItem
	if n := len(keys); n <= manyInline {
		ready, waiters = m.ready[:0:n], m.waiters[:n:n]
	} else {
		ready = make([]Lent, 0, n)
	}
	if l.err != nil {
		l.mu.Unlock()
		return fmt.Errorf("rendezvous: recv %d tensors: %w", len(keys), l.err)
	}
	for i, key := range keys {
		if _, dup := index[key]; dup {
			l.mu.Unlock()
			return fmt.Errorf("rendezvous: recv %q: the key is asked for twice", key)
		}
		index[key] = i
		it, ok := l.items.get(key)
		switch {
		case ok && it.sent:
			l.items.delete(key)
			ready = append(ready, lentOf(i, it))
		case ok:
			for k, it := range pending { // undo
				l.deleteIfSame(k, it)
			}
			l.mu.Unlock()
			return fmt.Errorf("rendezvous: recv %q: another receiver already waits for this key", key)
		default:
			if len(waiters) == 0 {
				waiters = make([]localItem, len(keys)-i)
			}
			it = &waiters[0]
			waiters = waiters[1:]
			it.many = m
			l.items.put(key, it)
			pending[key] = it
		}
	}
	l.mu.Unlock()
	// The end of ctx wakes the waiter too: a stepctx.Context (a
	// request's) through m's Hook, without an allocation, another
	// context through context.AfterFunc.
	if len(pending) > 0 {
		if sctx, ok := stepctx.Of(ctx); ok {
			sctx.WatchWaker(&m.hook, m)
			defer sctx.Unwatch(&m.hook)
		} else if ctx.Done() != nil {
			stop := context.AfterFunc(ctx, m.Wake)
			defer stop()
		}
	}
	for {
		if len(ready) > 0 {
			got(ready)
			ready = ready[:0]
		}
		if len(pending) == 0 {
			return nil
		}
		l.mu.Lock()
		for !m.woken {
			m.cond.Wait()
		}
		m.woken = false
		stop := ctx.Err()
		if l.err != nil { // aborted: the table, and so pending, is dropped
			stop = l.err
			l.mu.Unlock()
			return fmt.Errorf("rendezvous: recv %d tensors: %w", len(pending), stop)
		}
		for key, it := range pending {
			if it.sent { // sent while we were giving up: delivered anyway
				l.deleteIfSame(key, it)
				delete(pending, key)
				ready = append(ready, lentOf(index[key], it))
			} else if stop != nil {
				l.deleteIfSame(key, it)
			}
		}
		l.mu.Unlock()
		if stop != nil {
			if len(ready) > 0 {
				got(ready)
			}
			return fmt.Errorf("rendezvous: recv %d tensors: %w", len(pending), stop)
		}
	}
}

// manyInline is the number of keys up to which RecvManyLent's buffers
// take one allocation (manyWait).
const manyInline = 4

// manyWait is one RecvManyLent's: how its waiter is woken (by Send and
// Abort, with l.mu held, and by the end of its context) and, for a few
// keys, the storage of its ready tensors and waiting receivers. A
// condition on l.mu, where a channel was one more allocation, and a Hook
// on its context, where selecting on Done made one.
type manyWait struct {
	l     *Local
	cond  sync.Cond // on l.mu; woken is set
	woken bool      // l.mu
	hook  stepctx.Hook

	ready   [manyInline]Lent
	waiters [manyInline]localItem
}

// wakeLocked wakes m's waiter; l.mu is held.
func (m *manyWait) wakeLocked() {
	m.woken = true
	m.cond.Signal()
}

// Wake wakes m's waiter: its context ended (stepctx.Waker). It takes
// l.mu, which no one holds while ending a context.
func (m *manyWait) Wake() {
	m.l.mu.Lock()
	m.wakeLocked()
	m.l.mu.Unlock()
}

func lentOf(i int, it *localItem) Lent {
	release := it.release
	if release == nil {
		release = func() {}
	}
	return Lent{Index: i, T: it.t, Release: release}
}

// Recv returns the tensor sent under key, waiting for it if needed. It fails
// when ctx ends (wrapping ctx.Err()), when the rendezvous is aborted (wrapping
// ErrAborted and the abort reason), or when another Recv already waits for the
// same key.
func (l *Local) Recv(ctx context.Context, key string) (*tensor.Tensor, error) {
	it, err := l.recv(ctx, key)
	if err != nil {
		return nil, err
	}
	return it.t, nil
}

// RecvLent is Recv that also returns the release function of a tensor
// sent with SendLent, which the caller must call once it no longer reads
// the tensor; it does nothing for a tensor sent with Send.
func (l *Local) RecvLent(ctx context.Context, key string) (*tensor.Tensor, func(), error) {
	it, err := l.recv(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	if it.release == nil {
		return it.t, func() {}, nil
	}
	return it.t, it.release, nil
}

func (l *Local) recv(ctx context.Context, key string) (*localItem, error) {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return nil, fmt.Errorf("rendezvous: recv %q: %w", key, l.err)
	}
	it, ok := l.items.get(key)
	if ok && it.sent {
		l.items.delete(key)
		l.mu.Unlock()
		return it, nil
	}
	if ok {
		l.mu.Unlock()
		return nil, fmt.Errorf("rendezvous: recv %q: another receiver already waits for this key", key)
	}
	it = l.newItemLocked()
	it.ready = make(chan struct{})
	l.items.put(key, it)
	aborted := l.abortedLocked()
	l.mu.Unlock()

	select {
	case <-it.ready:
		l.mu.Lock()
		l.deleteIfSame(key, it)
		l.mu.Unlock()
		return it, nil
	case <-aborted:
		// Abort cleared the table; l.err is set before aborted is closed.
		l.mu.Lock()
		err := l.err
		l.mu.Unlock()
		return nil, fmt.Errorf("rendezvous: recv %q: %w", key, err)
	case <-ctx.Done():
		l.mu.Lock()
		defer l.mu.Unlock()
		if it.sent { // sent while we were giving up: deliver it anyway
			l.deleteIfSame(key, it)
			return it, nil
		}
		l.deleteIfSame(key, it)
		return nil, fmt.Errorf("rendezvous: recv %q: %w", key, ctx.Err())
	}
}

func (l *Local) deleteIfSame(key string, it *localItem) {
	if got, _ := l.items.get(key); got == it {
		l.items.delete(key)
	}
}

// Abort fails the rendezvous: every waiting Recv returns at once and every
// later Send or Recv fails, with an error wrapping ErrAborted and err (which
// may be nil). Tensors sent but not received are dropped. Only the first
// Abort counts; later calls do nothing.
func (l *Local) Abort(err error) {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return
	}
	switch {
	case err == nil:
		l.err = ErrAborted
	case errors.Is(err, ErrAborted):
		l.err = err
	default:
		l.err = fmt.Errorf("%w: %w", ErrAborted, err)
	}
	l.abortLocked()
}

// abortDone is Abort(stepDone(stepID)), the end of a finished step, with
// the error kept in l rather than allocated.
func (l *Local) abortDone(stepID int64) {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return
	}
	l.done = stepDone(stepID)
	l.err = &l.done
	l.abortLocked()
}

// abortLocked ends Abort once l.err is set: it unlocks l.mu.
func (l *Local) abortLocked() {
	// RecvManyLent's receivers wait on their condition, not on
	// l.aborted, which they so need not make.
	l.items.each(func(it *localItem) {
		if it.many != nil && !it.sent {
			it.many.wakeLocked()
		}
	})
	l.items = itemTable{} // dropped: no operation adds to it any more
	if l.aborted == nil {
		l.aborted = closedChan
	} else {
		close(l.aborted)
	}
	fns := l.onAbort
	l.onAbort = nil
	l.mu.Unlock()
	for _, a := range fns {
		a.call()
	}
}

// afterAbort arranges for f to be called, on the goroutine that aborts l,
// when l is aborted (at once, on this goroutine, if it already is), until
// stopAbort is called with the returned handle. It is what a goroutine
// waiting on Done would do, without starting one: a remote Recv did at
// every step.
func (l *Local) afterAbort(f func()) *abortFunc {
	a := &abortFunc{f: f}
	l.addAbort(a)
	return a
}

// addAbort is afterAbort of a.f, for a caller that provides a.
func (l *Local) addAbort(a *abortFunc) {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		a.call()
		return
	}
	if l.onAbort == nil {
		l.onAbort = l.onAbortBuf[:0]
	}
	l.onAbort = append(l.onAbort, a)
	l.mu.Unlock()
}

// stopAbort undoes afterAbort: a's function is not called after it returns
// (unless it was already running). It reports whether it was registered:
// false means that the abort has called it, or is calling it.
func (l *Local) stopAbort(a *abortFunc) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, b := range l.onAbort {
		if b == a {
			l.onAbort = slices.Delete(l.onAbort, i, i+1)
			return true
		}
	}
	return false
}

// Err returns the abort error, or nil while the rendezvous is live.
func (l *Local) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Done returns a channel closed when the rendezvous is aborted.
func (l *Local) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.abortedLocked()
}

// Pending returns the number of keys sent but not received plus receivers
// waiting: zero after a step whose transfers all completed.
func (l *Local) Pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.items.len()
}

// itemTable maps keys to items. The first few keys live in an array, so
// that a step with few transfers makes no map; more spill into one.
type itemTable struct {
	n     int // keys in small
	small [4]itemEntry
	big   map[string]*localItem // once made, it holds every key
}

type itemEntry struct {
	key string
	it  *localItem
}

func (t *itemTable) get(key string) (*localItem, bool) {
	if t.big != nil {
		it, ok := t.big[key]
		return it, ok
	}
	for _, e := range t.small[:t.n] {
		if e.key == key {
			return e.it, true
		}
	}
	return nil, false
}

// put adds key, which t does not hold.
func (t *itemTable) put(key string, it *localItem) {
	if t.big == nil && t.n < len(t.small) {
		t.small[t.n] = itemEntry{key, it}
		t.n++
		return
	}
	if t.big == nil {
		t.big = make(map[string]*localItem, 2*len(t.small))
		for _, e := range t.small[:t.n] {
			t.big[e.key] = e.it
		}
		clear(t.small[:])
		t.n = 0
	}
	t.big[key] = it
}

func (t *itemTable) delete(key string) {
	if t.big != nil {
		delete(t.big, key)
		return
	}
	for i := range t.n {
		if t.small[i].key == key {
			t.n--
			t.small[i] = t.small[t.n]
			t.small[t.n] = itemEntry{}
			return
		}
	}
}

// each calls f with every item of t.
func (t *itemTable) each(f func(*localItem)) {
	if t.big != nil {
		for _, it := range t.big {
			f(it)
		}
		return
	}
	for _, e := range t.small[:t.n] {
		f(e.it)
	}
}

func (t *itemTable) len() int {
	if t.big != nil {
		return len(t.big)
	}
	return t.n
}
