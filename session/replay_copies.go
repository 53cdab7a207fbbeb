package session

import (
	"sync"
	"sync/atomic"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// liveCopies keeps a resumed session from getting live what its replay
// has delivered already.
//
// A replay reads each partition once, to the end offsets it listed
// (replay.go), and the reverse path hands the same partitions out to the
// live subscribers at its own pace: behind the replay's end when it lags
// (a reconnect storm, slow subscribers), or from a partition's start when
// it finds a topic only after the resume (a new topic of a /regex/). Each
// record it hands out below the replay's end then reached the session
// twice: three records produced while a session was away came six times
// after a clean reconnect. The forward path's local delivery can come
// after the replay too (an acknowledgement waiting behind the publisher's
// earlier ones). Such a delivery is a copy (sessionPositions.liveCopy)
// and is not delivered.
//
// mochi fans a message out to every subscriber and has no hook that takes
// one subscriber out of one delivery. So a copy is found when mochi reports
// it in flight (OnQosPublish: the injection under the packet's origin names
// its record) and marked; when the client's write loop comes to it
// (OnPacketEncode) it is taken out of flight and not written: its packet
// gets a maximum size it exceeds, and mochi's WritePacket discards it
// unwritten (as MQTT 5 has a server discard a packet too large for its
// client). Until then it stays in flight, so its packet id cannot go to
// another delivery; it does not count against a replay's window
// (pending). A copy whose client went before its write is taken out of
// flight when the client goes (its next connection here would get it
// resent) or, for a connection taken over here, when the new one
// establishes, before mochi moves the messages in flight to it. The send
// quota of an MQTT 5 client (its Receive Maximum) is given back when the
// copy is discarded; a delivery mochi parked meanwhile for want of quota
// goes out after the client's next packet, when mochi looks for parked
// ones.
//
// A mark names its packet by the first byte of its payload: mochi copies
// the payload for each subscriber, and every later copy of the packet (in
// the write queue, in the in-flight store) shares it. So a mark never
// applies to another packet, not even to one that got the same packet id
// after the copy left flight another way (mochi dropped it from a full
// write queue, its expiry passed). A copy with an empty payload cannot be
// named so: it is delivered.
type liveCopies struct {
	marked atomic.Int64 // marks of all clients: OnPacketEncode looks only when there are some
	mu     sync.Mutex
	m      map[*mqtt.Client]map[uint16]*byte // client -> packet id -> the copy's payload
}

// payloadID names the packet whose payload is p (nil: cannot be named).
func payloadID(p []byte) *byte {
	if len(p) == 0 {
		return nil
	}
	return &p[0]
}

// mark notes that cl's delivery pk is a copy; false: it cannot be named.
func (l *liveCopies) mark(cl *mqtt.Client, pk packets.Packet) bool {
	id := payloadID(pk.Payload)
	if id == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[*mqtt.Client]map[uint16]*byte{}
	}
	ids := l.m[cl]
	if ids == nil {
		ids = map[uint16]*byte{}
		l.m[cl] = ids
	}
	if _, ok := ids[pk.PacketID]; !ok {
		l.marked.Add(1)
	}
	ids[pk.PacketID] = id
	return true
}

// unmark forgets a mark of cl's packet id pid: a new delivery has it (the
// copy marked under it left flight unwritten some other way).
func (l *liveCopies) unmark(cl *mqtt.Client, pid uint16) {
	if l.marked.Load() == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if ids := l.m[cl]; ids != nil {
		if _, ok := ids[pid]; ok {
			l.forgetLocked(cl, ids, pid)
		}
	}
}

// forgetLocked drops the mark of cl's pid; under mu.
func (l *liveCopies) forgetLocked(cl *mqtt.Client, ids map[uint16]*byte, pid uint16) {
	delete(ids, pid)
	l.marked.Add(-1)
	if len(ids) == 0 {
		delete(l.m, cl)
	}
}

// take reports whether pk, about to be written to cl, is a marked copy,
// and forgets its mark.
func (l *liveCopies) take(cl *mqtt.Client, pk packets.Packet) bool {
	if l.marked.Load() == 0 {
		return false
	}
	id := payloadID(pk.Payload)
	if id == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := l.m[cl]
	if ids == nil || ids[pk.PacketID] != id {
		return false
	}
	l.forgetLocked(cl, ids, pk.PacketID)
	return true
}

// pending counts cl's copies not written yet.
func (l *liveCopies) pending(cl *mqtt.Client) int {
	if l.marked.Load() == 0 {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m[cl])
}

// marks returns cl's marks (packet id -> payload), and forgets them when
// forget is set.
func (l *liveCopies) marks(cl *mqtt.Client, forget bool) map[uint16]*byte {
	if l.marked.Load() == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := l.m[cl]
	if len(ids) == 0 {
		return nil
	}
	out := make(map[uint16]*byte, len(ids))
	for pid, id := range ids {
		out[pid] = id
	}
	if forget {
		l.marked.Add(-int64(len(ids)))
		delete(l.m, cl)
	}
	return out
}

// discardCopy marks cl's delivery pk, in flight now, as a copy not to be
// written (see liveCopies); false: it cannot be.
func (h *sessionHook) discardCopy(cl *mqtt.Client, pk packets.Packet) bool {
	if !h.copies.mark(cl, pk) {
		return false
	}
	if h.metrics != nil {
		h.metrics.liveCopies.Inc()
	}
	return true
}

// outOfFlight takes cl's copy under packet id pid (its payload named id)
// out of flight, if it is still there, and gives back the send quota it
// took.
func (h *sessionHook) outOfFlight(cl *mqtt.Client, pid uint16, id *byte) {
	if q, ok := cl.State.Inflight.Get(pid); !ok || payloadID(q.Payload) != id {
		return
	}
	if cl.State.Inflight.Delete(pid) {
		atomic.AddInt64(&h.server.Info.Inflight, -1)
		cl.State.Inflight.IncreaseSendQuota()
	}
}

// dropCopies takes cl's copies not written yet out of flight (it went, or
// a new connection takes its session over); forget: and forgets their
// marks (cl's write loop writes nothing more).
func (h *sessionHook) dropCopies(cl *mqtt.Client, forget bool) {
	for pid, id := range h.copies.marks(cl, forget) {
		h.outOfFlight(cl, pid, id)
	}
}
