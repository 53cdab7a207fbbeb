package session

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
//
// From the hold's start until the replay ends, the live deliveries not yet
// written are tracked by packet id (OnQosPublish adds, OnPacketSent
// removes): the last pass must not write a partition's later records before
// such a delivery reaches the wire (replay_defer.go).
type liveHold struct {
	mu        sync.Mutex
	ch        chan struct{} // nil: not holding
	tracking  bool
	unwritten map[uint16]Coord // live deliveries in flight, not yet written
	// live are the messages whose live delivery reached the client's
	// connection since the hold started: the last pass and its drain do
	// not send them again (a kept record whose live delivery was written
	// and acknowledged before the drain came to it went twice). A live
	// delivery dropped before its write (a full outbound queue, its expiry)
	// is not among them: the pass delivers it.
	live map[Coord]bool
}

// start holds live deliveries until the returned release is called, and
// tracks them until end is called.
// tracking counts the sessions whose live deliveries are tracked (a gate
// that keeps OnPacketSent cheap when no replay runs).
func (l *liveHold) start(holding, tracking *atomic.Int32) (release func()) {
	tracking.Add(1) // first: OnQosPublish calls enqueued only when it is not 0
	l.mu.Lock()
	l.ch = make(chan struct{})
	l.tracking = true
	l.unwritten = map[uint16]Coord{}
	l.live = map[Coord]bool{}
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

// end stops tracking live deliveries (the replay is over).
func (l *liveHold) end(tracking *atomic.Int32) {
	l.mu.Lock()
	l.tracking = false
	l.unwritten, l.live = nil, nil
	l.mu.Unlock()
	tracking.Add(-1)
}

// waiting returns the channel a live delivery waits on, or nil.
func (l *liveHold) waiting() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ch
}

// enqueued notes a live delivery (packet id pid, the message at c; offset
// < 0: unknown) put in flight, not yet written.
func (l *liveHold) enqueued(pid uint16, c Coord) {
	l.mu.Lock()
	if l.tracking {
		l.unwritten[pid] = c
	}
	l.mu.Unlock()
}

// wasLive reports whether a live delivery of the message at c reached the
// client's connection since the hold started.
func (l *liveHold) wasLive(c Coord) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.live[c]
}

// written notes that packet id pid reached the client's connection.
func (l *liveHold) written(pid uint16) {
	l.mu.Lock()
	if c, ok := l.unwritten[pid]; ok {
		if c.Offset >= 0 {
			l.live[c] = true
		}
		delete(l.unwritten, pid)
	}
	l.mu.Unlock()
}

// held counts the live deliveries in flight not yet written: the pass's
// window does not count them.
func (l *liveHold) held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.unwritten)
}

// unwrittenAt returns the packet id of a live delivery of the message at c
// not yet written.
func (l *liveHold) unwrittenAt(c Coord) (uint16, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for pid, u := range l.unwritten {
		if u == c {
			return pid, true
		}
	}
	return 0, false
}

// isUnwritten reports whether the live delivery under pid is not written yet.
func (l *liveHold) isUnwritten(pid uint16) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.unwritten[pid]
	return ok
}

// OnPacketEncode holds a live delivery to a session whose replay's last
// pass runs (liveHold), discards a live copy of a replayed message
// (liveCopies), and records the PUBREL of a delivery (positions.go flow).
func (h *sessionHook) OnPacketEncode(cl *mqtt.Client, pk packets.Packet) packets.Packet {
	if pk.FixedHeader.Type == packets.Pubrel {
		// The client's PUBREC of a QoS 2 delivery came: a resume resends
		// this PUBREL, not the PUBLISH [MQTT-4.4.0-1].
		if pk.ReasonCode < 0x80 {
			if o := h.ownedBy(cl); o != nil && o.pos != nil {
				o.pos.released(pk.PacketID)
			}
		}
		return pk
	}
	if pk.FixedHeader.Type == packets.Publish && h.copies.take(cl, pk) {
		// A copy of a replayed message (replay_copies.go): out of flight,
		// and too large to be written.
		h.outOfFlight(cl, pk.PacketID, payloadID(pk.Payload))
		pk.Mods.MaxSize = 1
		return pk
	}
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

// OnPacketSent: a live delivery reached the client's connection (mochi
// calls it after the write, outside the client's write lock: a write
// started after it lands behind it).
func (h *sessionHook) OnPacketSent(cl *mqtt.Client, pk packets.Packet, _ []byte) {
	if h.tracking.Load() == 0 || pk.FixedHeader.Type != packets.Publish || pk.Origin == "" || pk.FixedHeader.Qos == 0 {
		return
	}
	if o := h.ownedBy(cl); o != nil {
		o.live.written(pk.PacketID)
	}
}
