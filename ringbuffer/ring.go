package ringbuffer

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
)

// Errors returned by the ring.
var (
	// ErrClosed is returned by pushes after Close, and by PopBatch once the
	// ring is closed and drained.
	ErrClosed = errors.New("ringbuffer: closed")
	// ErrCapacity is returned (wrapped, with the rejected value) by New when
	// the capacity is not a power of two >= 2.
	ErrCapacity = errors.New("ringbuffer: capacity must be a power of two >= 2")
)

const (
	// closedBit is set in tail by Close: no position can be claimed after it.
	closedBit = uint64(1) << 63
	// maxCapacity keeps positions far away from closedBit.
	maxCapacity = 1 << 40
	// spinTries is how many times an empty PopBatch retries before parking;
	// the first spinTight tries do not even yield. Short: on an idle core a
	// consumer that keeps yielding burns CPU that a park (one wake-up per
	// empty spell) does not.
	spinTries = 16
	spinTight = 8
	// pushSpinTries is the same for a full Push; it is low because on a
	// small machine a spinning producer takes the CPU the consumer needs to
	// make room.
	pushSpinTries = 16
)

type cacheLinePad [64]byte

type slot[T any] struct {
	seq atomic.Uint64
	val T
}

// Ring is a bounded lock-free MPMC FIFO. Create it with New; the zero value is
// not usable. All methods are safe for concurrent use.
type Ring[T any] struct {
	_    cacheLinePad
	tail atomic.Uint64 // next position to push; closedBit once closed
	_    cacheLinePad
	head atomic.Uint64 // next position to pop
	_    cacheLinePad
	// parkedPop counts consumers that announced they are about to park;
	// producers load it after every push (read-mostly line).
	parkedPop atomic.Int32
	_         cacheLinePad
	// parkedPush counts producers parked in Push; consumers load it after
	// every pop.
	parkedPush atomic.Int32
	_          cacheLinePad
	// parks counts goroutines that parked (Push and PopBatch), for the
	// benchmarks: on an idle machine each park and wake costs far more CPU
	// than the push itself. Written only on the slow path.
	parks atomic.Int64

	mask     uint64
	slots    []slot[T]
	notEmpty chan struct{} // 1-token semaphore: a consumer may proceed
	notFull  chan struct{} // tokens for parked producers (up to maxPushTokens)
	done     chan struct{} // closed by Close
}

// New returns an empty ring holding up to capacity items. capacity must be a
// power of two >= 2.
func New[T any](capacity int) (*Ring[T], error) {
	if capacity < 2 || capacity > maxCapacity || capacity&(capacity-1) != 0 {
		return nil, fmt.Errorf("%w: got %d", ErrCapacity, capacity)
	}
	r := &Ring[T]{
		mask:     uint64(capacity - 1),
		slots:    make([]slot[T], capacity),
		notEmpty: make(chan struct{}, 1),
		notFull:  make(chan struct{}, maxPushTokens),
		done:     make(chan struct{}),
	}
	for i := range r.slots {
		r.slots[i].seq.Store(uint64(i))
	}
	return r, nil
}

// Cap returns the capacity given to New.
func (r *Ring[T]) Cap() int { return len(r.slots) }

// Len returns the number of items in the ring (claimed by producers and not
// yet claimed by consumers). It is a snapshot, meant for metrics.
func (r *Ring[T]) Len() int {
	h := r.head.Load()
	t := r.tail.Load() &^ closedBit
	if t <= h {
		return 0
	}
	if n := t - h; n < uint64(len(r.slots)) {
		return int(n)
	}
	return len(r.slots)
}

// Closed reports whether Close has been called.
func (r *Ring[T]) Closed() bool { return r.tail.Load()&closedBit != 0 }

// Close refuses further pushes and wakes every parked producer and consumer.
// Items already in the ring stay there for PopBatch/TryPop to drain. Close is
// idempotent.
func (r *Ring[T]) Close() {
	if r.tail.Or(closedBit)&closedBit == 0 {
		close(r.done)
	}
}

type pushResult int

const (
	pushed pushResult = iota
	full
	closed
)

// tryPush is one lock-free attempt to append v.
func (r *Ring[T]) tryPush(v T) pushResult {
	pos := r.tail.Load()
	for {
		if pos&closedBit != 0 {
			return closed
		}
		s := &r.slots[pos&r.mask]
		seq := s.seq.Load()
		switch dif := int64(seq - pos); {
		case dif == 0:
			if r.tail.CompareAndSwap(pos, pos+1) {
				s.val = v
				s.seq.Store(pos + 1)
				r.wakePop()
				return pushed
			}
			pos = r.tail.Load()
		case dif < 0:
			// The slot still holds the item of the previous lap.
			return full
		default:
			pos = r.tail.Load()
		}
	}
}

// wakePop hands a token to a parked consumer, if there is one.
func (r *Ring[T]) wakePop() {
	if r.parkedPop.Load() > 0 {
		signal(r.notEmpty)
	}
}

// wakePush hands a token to a producer parked in Push, if there is one.
func (r *Ring[T]) wakePush() {
	if r.parkedPush.Load() > 0 {
		signal(r.notFull)
	}
}

// maxPushTokens bounds the producers one pop wakes at once.
const maxPushTokens = 64

// wakePushN wakes up to n parked producers at once (a pop freed n slots):
// woken one by one, each waiting for the previous to run, producers would
// refill the ring at the pace of goroutine wake-ups while the consumer
// runs dry and parks.
func (r *Ring[T]) wakePushN(n int) {
	k := min(int(r.parkedPush.Load()), n, maxPushTokens) - len(r.notFull)
	for range k {
		select {
		case r.notFull <- struct{}{}:
		default:
			return
		}
	}
}

// signal leaves a token in ch unless one is already pending; len avoids the
// channel lock when many producers wake the same sleeper.
func signal(ch chan struct{}) {
	if len(ch) > 0 {
		return
	}
	select {
	case ch <- struct{}{}:
	default: // a token is already pending
	}
}

// TryPush appends v without waiting. It returns false when the ring is full
// or closed.
func (r *Ring[T]) TryPush(v T) bool { return r.tryPush(v) == pushed }

// Push appends v, waiting (parked, not polling) while the ring is full. It
// returns ErrClosed if the ring is or gets closed first, or ctx.Err() if ctx
// ends first. A free slot is taken even if ctx is already done.
func (r *Ring[T]) Push(ctx context.Context, v T) error {
	for spin := 0; ; spin++ {
		switch r.tryPush(v) {
		case pushed:
			if spin > pushSpinTries {
				// We were parked: others may be too, and there may be room.
				if r.Len() < len(r.slots) {
					r.wakePush()
				}
			}
			return nil
		case closed:
			return ErrClosed
		}
		if spin < pushSpinTries {
			if spin >= spinTight {
				runtime.Gosched()
			}
			continue
		}
		r.parkedPush.Add(1)
		r.parks.Add(1)
		switch r.tryPush(v) {
		case pushed:
			r.parkedPush.Add(-1)
			return nil
		case closed:
			r.parkedPush.Add(-1)
			return ErrClosed
		}
		select {
		case <-r.notFull:
		case <-r.done:
		case <-ctx.Done():
			r.parkedPush.Add(-1)
			return ctx.Err()
		}
		r.parkedPush.Add(-1)
	}
}

// tryPopBatch claims the longest run (up to len(dst)) of published items at
// the head with one CAS and moves them into dst.
func (r *Ring[T]) tryPopBatch(dst []T) int {
	want := uint64(len(dst))
	for {
		pos := r.head.Load()
		var n uint64
		for n < want {
			seq := r.slots[(pos+n)&r.mask].seq.Load()
			if seq != pos+n+1 {
				break
			}
			n++
		}
		if n == 0 {
			seq := r.slots[pos&r.mask].seq.Load()
			if int64(seq-(pos+1)) < 0 {
				return 0 // empty (or the next item is still being written)
			}
			continue // another consumer moved head
		}
		if !r.head.CompareAndSwap(pos, pos+n) {
			continue
		}
		var zero T
		lap := r.mask + 1
		for i := range n {
			s := &r.slots[(pos+i)&r.mask]
			dst[i] = s.val
			s.val = zero
			s.seq.Store(pos + i + lap)
		}
		r.wakePushN(int(n))
		return int(n)
	}
}

// TryPop removes and returns the oldest item without waiting.
func (r *Ring[T]) TryPop() (T, bool) {
	var one [1]T
	if r.tryPopBatch(one[:]) == 1 {
		return one[0], true
	}
	return one[0], false
}

// drained reports whether the ring is closed and every claimed position has
// been consumed.
func (r *Ring[T]) drained() bool {
	t := r.tail.Load()
	return t&closedBit != 0 && r.head.Load() == t&^closedBit
}

// PopBatch moves up to len(dst) of the oldest items into dst and returns how
// many. While the ring is empty it spins briefly, then parks until a producer
// wakes it. It returns n > 0 and a nil error whenever it got items; once the
// ring is closed and drained it returns (0, ErrClosed); if ctx ends while it
// waits it returns (0, ctx.Err()). An empty dst returns (0, nil) at once.
func (r *Ring[T]) PopBatch(ctx context.Context, dst []T) (int, error) {
	if len(dst) == 0 {
		return 0, nil
	}
	for spin := 0; ; spin++ {
		if n := r.tryPopBatch(dst); n > 0 {
			r.passOnPop()
			return n, nil
		}
		if r.drained() {
			return 0, ErrClosed
		}
		if spin < spinTries || r.Closed() {
			// After Close there is nothing to park on; the only way to get
			// here is a producer that claimed a slot before Close and is
			// still writing it, which takes nanoseconds.
			if spin >= spinTight {
				runtime.Gosched()
			}
			if spin >= spinTries {
				if err := ctx.Err(); err != nil {
					return 0, err
				}
			}
			continue
		}
		r.parkedPop.Add(1)
		r.parks.Add(1)
		if n := r.tryPopBatch(dst); n > 0 {
			r.parkedPop.Add(-1)
			r.passOnPop()
			return n, nil
		}
		select {
		case <-r.notEmpty:
		case <-r.done:
		case <-ctx.Done():
			r.parkedPop.Add(-1)
			return 0, ctx.Err()
		}
		r.parkedPop.Add(-1)
		spin = spinTries // woken: re-check, then park again if robbed
	}
}

// passOnPop wakes another parked consumer when items are left, so one token
// cannot strand a second consumer.
func (r *Ring[T]) passOnPop() {
	if r.parkedPop.Load() > 0 && r.Len() > 0 {
		signal(r.notEmpty)
	}
}

// PushEvict appends v; if the ring is full it first removes the oldest item
// and returns it with didEvict = true (drop-oldest: the caller accounts for
// the evicted item). At most one item is evicted per call. It never waits for
// space; at most it waits, briefly, for another goroutine to finish writing
// or vacating a slot. After Close it returns ErrClosed; if Close lands while
// it is evicting, it returns the evicted item together with ErrClosed (v was
// not stored, evicted was removed).
func (r *Ring[T]) PushEvict(v T) (evicted T, didEvict bool, err error) {
	for spin := 0; ; spin++ {
		switch r.tryPush(v) {
		case pushed:
			return evicted, false, nil
		case closed:
			return evicted, false, ErrClosed
		}
		if pos, ok := r.claimOldest(&evicted); ok {
			return evicted, true, r.replaceHeld(pos, v)
		}
		// Full, yet the oldest item is not readable: its producer is still
		// writing it. That takes nanoseconds unless it was preempted.
		if spin >= spinTight {
			runtime.Gosched()
		}
	}
}

// claimOldest claims the item at head like a consumer, moves it into *out,
// but keeps its slot unreleased (sequence still pos+1), so no producer can
// take the slot while we decide where v goes.
func (r *Ring[T]) claimOldest(out *T) (uint64, bool) {
	for {
		pos := r.head.Load()
		s := &r.slots[pos&r.mask]
		seq := s.seq.Load()
		switch dif := int64(seq - (pos + 1)); {
		case dif == 0:
			if r.head.CompareAndSwap(pos, pos+1) {
				var zero T
				*out = s.val
				s.val = zero
				return pos, true
			}
		case dif < 0:
			return 0, false // empty
		}
	}
}

// replaceHeld stores v after the caller evicted position held (slot still
// unreleased). Either the ring is still full, so tail stands exactly one lap
// after held and v goes into the held slot, or space appeared elsewhere, v
// goes at tail and the held slot is released.
func (r *Ring[T]) replaceHeld(held uint64, v T) error {
	lap := r.mask + 1
	hs := &r.slots[held&r.mask]
	for spin := 0; ; spin++ {
		pos := r.tail.Load()
		if pos&closedBit != 0 {
			hs.seq.Store(held + lap)
			r.wakePush()
			return ErrClosed
		}
		if pos == held+lap {
			// tail cannot move past our unreleased slot: only Close races us.
			if r.tail.CompareAndSwap(pos, pos+1) {
				hs.val = v
				hs.seq.Store(pos + 1)
				r.wakePop()
				return nil
			}
			continue
		}
		s := &r.slots[pos&r.mask]
		if s.seq.Load() == pos && r.tail.CompareAndSwap(pos, pos+1) {
			s.val = v
			s.seq.Store(pos + 1)
			r.wakePop()
			hs.seq.Store(held + lap)
			r.wakePush()
			return nil
		}
		// Slot at tail is still being vacated by a consumer or held by
		// another evicting producer; both finish without waiting on us.
		if spin >= spinTight {
			runtime.Gosched()
		}
	}
}

// parkedConsumers is for tests: consumers announced as parked.
func (r *Ring[T]) parkedConsumers() int { return int(r.parkedPop.Load()) }

// parkedProducers is for tests: producers announced as parked in Push.
func (r *Ring[T]) parkedProducers() int { return int(r.parkedPush.Load()) }
