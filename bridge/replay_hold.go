package bridge

import (
	"sync"
	"sync/atomic"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// liveHold keeps a resumed session's live deliveries waiting while the
// replay's last pass runs. The subscriptions go live before that pass
// (replay.go catchUp), so that nothing appended meanwhile is missed; but
// the pass writes older messages than those the live path delivers at the
// same time, and without the hold a live message overtook them (the
// sessions soak, TestSessionsSoakKill9: "... 28 35 36 ... 41 29 30 ...").
//
// Live deliveries reach a client through mochi's outbound queue, written by
// the client's write loop: the hold blocks that loop in OnPacketEncode, so
// they wait in the queue, in order, and are written after the pass. The
// pass's own writes (no origin) and the messages mochi writes from the
// client's read goroutine (parked for want of send quota: Expiry < 0) are
// not held; blocking the read goroutine would stop the acknowledgements the
// pass waits for.
type liveHold struct {
	mu sync.Mutex
	ch chan struct{} // nil: not holding
	// held counts the live deliveries put in flight while holding: they are
	// not written yet, so the pass's window does not count them.
	held atomic.Int32
}

// start holds live deliveries until the returned function is called.
func (l *liveHold) start(holding *atomic.Int32) (release func()) {
	l.mu.Lock()
	l.ch = make(chan struct{})
	l.held.Store(0)
	l.mu.Unlock()
	holding.Add(1)
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			close(l.ch)
			l.ch = nil
			l.mu.Unlock()
			holding.Add(-1)
		})
	}
}

// waiting returns the channel a live delivery waits on, or nil.
func (l *liveHold) waiting() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ch
}

// OnPacketEncode holds a live delivery to a session whose replay's last
// pass runs (liveHold).
func (h *sessionHook) OnPacketEncode(cl *mqtt.Client, pk packets.Packet) packets.Packet {
	if h.holding.Load() == 0 || pk.FixedHeader.Type != packets.Publish || pk.Origin == "" || pk.Expiry < 0 {
		return pk
	}
	if o := h.ownedBy(cl); o != nil {
		if ch := o.live.waiting(); ch != nil {
			<-ch
		}
	}
	return pk
}
