package session

import (
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestLiveCopyDiscardedAndNothingElse: the mechanics under the two tests
// above. A session's replay read partition k/0 to offset 5 for filter q/#.
// A live delivery of offset 3 on q/a is a copy: in flight until the write
// loop reaches it, not the client's to acknowledge (the replay's window
// does not count it), then out of flight and not written. Offset 5 (past
// the replay), offset 3 on a topic the replay's filters do not match (a
// filter subscribed since) and a retained message mochi sends on a
// SUBSCRIBE while the record at 3 is injected are delivered. A packet that
// reuses the id of a copy mochi dropped unwritten is written.
func TestLiveCopyDiscardedAndNothingElse(t *testing.T) {
	h, o := hookWithSession(t)
	h.inj = new(Injections)
	cl := o.cl
	o.pos.startReplay([]string{"q/#"})
	o.pos.replayed(tp{"k", 0}, 5)
	o.pos.caughtUp(0)
	deliver := func(off int64, pid uint16, topic, payload string, retain bool) packets.Packet {
		t.Helper()
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: retain}, TopicName: topic,
			Payload: []byte(payload), PacketID: pid, Origin: "pub"}
		cl.State.Inflight.Set(pk)
		h.inj.Begin("pub", Coord{"k", 0, off}, topic)
		h.OnQosPublish(cl, pk, 0, 0)
		h.inj.End("pub")
		return pk
	}
	written := func(pk packets.Packet) bool { return h.OnPacketEncode(cl, pk).Mods.MaxSize != 1 }

	cp := deliver(3, 1, "q/a", "copy", false)
	if n := h.copies.pending(cl); n != 1 {
		t.Fatalf("%d copies pending after a live delivery of offset 3, want 1", n)
	}
	if _, ok := cl.State.Inflight.Get(1); !ok {
		t.Fatal("the copy left flight before its write: its packet id could go to another delivery")
	}
	fresh := deliver(5, 2, "q/a", "fresh", false)
	other := deliver(3, 3, "r/x", "other filter", false)
	retained := deliver(3, 4, "q/a", "retained", true)
	if written(cp) {
		t.Error("the live copy of offset 3 is written: the replay delivered it")
	}
	if _, ok := cl.State.Inflight.Get(1); ok {
		t.Error("the discarded copy is still in flight")
	}
	for _, pk := range []packets.Packet{fresh, other, retained} {
		if !written(pk) {
			t.Errorf("%s (packet id %d) is not written", pk.Payload, pk.PacketID)
		}
	}
	if got := o.pos.pendingList(); len(got) != 3 || got[0].PacketID != 2 {
		t.Errorf("pending deliveries %+v, want packet ids 2, 3 and 4 (the copy is not one)", got)
	}

	dropped := deliver(4, 5, "q/a", "dropped", false)
	cl.State.Inflight.Delete(dropped.PacketID) // mochi drops it from a full write queue
	reuse := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: "q/a",
		Payload: []byte("dropped"), PacketID: dropped.PacketID, Origin: "pub"}
	if !written(reuse) {
		t.Error("a packet reusing the id of a copy mochi dropped is not written")
	}
}

// TestLiveDeliveryBelowATimeStartIsNoCopy: a partition the replay read from
// a time (no position) and found nothing in since (started at its end, 5):
// the reverse path's live delivery of offset 3 (older than the
// subscriptions, never handed out before) is delivered, as to a clean
// session. Taken for a copy of what the replay "handled" up to 5, it was
// discarded, and the session never got the partition's backlog
// (TestReverseRestartAtLeastOnce, one partition of two lost now and then on
// a loaded machine). Below a position (partition k/1) it stays a copy: the
// session acknowledged it elsewhere.
func TestLiveDeliveryBelowATimeStartIsNoCopy(t *testing.T) {
	_, o := hookWithSession(t)
	o.pos.startReplay([]string{"q/#"})
	o.pos.startedByTime(tp{"k", 0}, 5)
	o.pos.replayed(tp{"k", 0}, 5)
	o.pos.replayed(tp{"k", 1}, 5)
	o.pos.caughtUp(0)
	if o.pos.liveCopy(Coord{"k", 0, 3}, "q/a") {
		t.Error("a live delivery below the replay's start by time is taken for a copy: it is never delivered")
	}
	if !o.pos.liveCopy(Coord{"k", 1, 3}, "q/a") {
		t.Error("a live delivery below a positioned replay's end is not taken for a copy")
	}
}
