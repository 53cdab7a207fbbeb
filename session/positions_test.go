package session

import (
	"slices"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ferry-bridge/ferry/internal/testhelp"
	"github.com/ferry-bridge/ferry/state"
)

// TestResendKeepsItsCoordinate: mochi resends a resumed session's in-flight
// messages itself (same instance) with DUP set, and reports each to
// OnQosPublish as a new send (resends 0, v2.7.9). Its coordinate is the one
// recorded when it was first sent; the injection running at that moment
// under the same origin (the publisher's next message delivered locally, or
// the reverse path's next record) is another message. Taking that one
// moved the position past messages the client never received: after the
// next crash a resume skipped them (the full-size sessions soak lost a
// whole stream of two sessions this way, a hypothesis this test pins).
func TestResendKeepsItsCoordinate(t *testing.T) {
	h, o := hookWithSession(t)
	h.inj = new(Injections)
	cl := o.cl
	first := Coord{"k", 0, 7}
	live := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: 3, Origin: "pub"}
	h.inj.Begin("pub", first, "")
	h.OnQosPublish(cl, live, 0, 0)
	h.inj.End("pub")
	// The resend, while the publisher's message at offset 40 is injected.
	h.inj.Begin("pub", Coord{"k", 0, 40}, "")
	resend := live
	resend.FixedHeader.Dup = true
	h.OnQosPublish(cl, resend, 0, 0)
	h.inj.End("pub")
	h.OnQosComplete(cl, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: 3})
	if pos := o.pos.snapshot(); len(pos) != 1 || pos[0].Offset != 8 || pos[0].Delivered != 8 {
		t.Fatalf("after the resent delivery of offset 7 was acknowledged the positions are %+v, want offset 8, delivered 8", pos)
	}
}

// TestSessionAckIsTheClients: only the client's PUBACK or PUBCOMP
// acknowledges a delivery. mochi reports its own acknowledgements of the
// client's publishes to OnQosComplete too (the PUBACK of an inbound QoS 1
// publish it answered, a PUBCOMP resent from the in-flight store), under
// the client's packet id, which may equal a pending delivery's: taking
// them for acknowledgements moved the position past a message the client
// never acknowledged.
func TestSessionAckIsTheClients(t *testing.T) {
	h, o := hookWithSession(t)
	cl := o.cl
	o.pos.sent(3, Coord{"k", 0, 7}, 1)
	for _, typ := range []byte{packets.Puback, packets.Pubcomp, packets.Pubrel} {
		own := packets.Packet{FixedHeader: packets.FixedHeader{Type: typ}, PacketID: 3, Created: time.Now().Unix()}
		h.OnQosComplete(cl, own)
	}
	h.OnQosComplete(cl, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrel}, PacketID: 3})
	if pos := o.pos.snapshot(); len(pos) != 0 && pos[0].Offset != 7 {
		t.Fatalf("after mochi's own acknowledgements under the delivery's packet id the positions are %+v, want none past offset 7", pos)
	}
	h.OnQosComplete(cl, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: 3})
	if pos := o.pos.snapshot(); len(pos) != 1 || pos[0].Offset != 8 {
		t.Fatalf("after the client's PUBACK the positions are %+v, want offset 8", pos)
	}
}

// TestPositionStopsAtReplayFrontier: while a replay has handed out a
// partition's records only up to offset 16, the client's acknowledgement
// of a later message (a live delivery written before the replay's older
// ones, offset 37) must not move the position past 16: a resume from 38
// skipped 16..36 for good (the full-size sessions soak lost them in
// sessions that resumed twice). The same holds between the replay's two
// passes, until the last pass has read what was appended meanwhile.
func TestPositionStopsAtReplayFrontier(t *testing.T) {
	p := newSessionPositions(nil, nil, 0, nil)
	k := tp{"k", 0}
	p.reading(k, 10)
	p.reading(k, 16)
	p.sent(1, Coord{"k", 0, 37}, 1)
	p.acked(1)
	if pos := p.snapshot(); len(pos) != 1 || pos[0].Offset != 16 || pos[0].Delivered != 38 {
		t.Fatalf("positions %+v, want offset 16 (the replay's frontier), delivered 38", pos)
	}
	p.replayed(k, 40)
	if pos := p.snapshot(); len(pos) != 1 || pos[0].Offset != 40 {
		t.Fatalf("positions after the replay read to 40: %+v, want offset 40", pos)
	}
	// Between the passes: the subscriptions are live, the last pass has
	// not read 40.. yet, and the client acknowledges a live delivery at 45.
	p.sent(2, Coord{"k", 0, 45}, 1)
	p.acked(2)
	if pos := p.snapshot(); len(pos) != 1 || pos[0].Offset != 40 {
		t.Fatalf("positions between the passes: %+v, want offset 40 (where the last pass starts)", pos)
	}
	p.caughtUp(0)
	if pos := p.snapshot(); len(pos) != 1 || pos[0].Offset != 46 {
		t.Fatalf("positions after the replay caught up: %+v, want offset 46", pos)
	}
}

// TestPositionStopsAtReverseProgress: a partition the reverse path consumes
// reaches a session by two paths, and the local one is faster: the
// session's acknowledgement of offset 40 (a local delivery) must not move
// its position past what the reverse path has handed out; a resume from 41
// skipped the rest for good.
func TestPositionStopsAtReverseProgress(t *testing.T) {
	rp := newReverseProgress(func(topic string) bool { return topic == "rev" }, false)
	p := newSessionPositions(nil, nil, 0, rp)
	p.sent(1, Coord{"rev", 0, 40}, 1)
	p.sent(2, Coord{"fwd", 0, 40}, 1)
	p.acked(1)
	p.acked(2)
	p.sent(3, Coord{"rev", 0, 45}, 1) // a local delivery not yet acknowledged
	at := func() map[string]int64 {
		out := map[string]int64{}
		for _, q := range p.snapshot() {
			out[q.Topic] = q.Offset
		}
		return out
	}
	if pos := at(); len(pos) != 1 || pos["fwd"] != 41 {
		t.Fatalf("positions %v before the reverse path handed out anything of rev/0: want none for rev (a resume reads it from the subscription's time), fwd 41", pos)
	}
	rp.handled(tp{"rev", 0}, 17)
	if pos := at(); pos["rev"] != 17 {
		t.Fatalf("position of rev/0 %d with the reverse path at 17, want 17", pos["rev"])
	}
	rp.handled(tp{"rev", 0}, 60)
	if pos := at(); pos["rev"] != 41 {
		t.Fatalf("position of rev/0 %d with the reverse path past it, want 41", pos["rev"])
	}
}

// TestPositionStopsAtOwnRecordAwaitingLocalDelivery: the reverse consumer
// skips this instance's own records (the local delivery brings them) and
// may hand out past one whose local delivery still waits (Kafka has
// acknowledged it; the publisher's earlier publishes have not been). A
// session that acknowledged a later record there, and then went, must not
// leave a position past the own record it never got.
func TestPositionStopsAtOwnRecordAwaitingLocalDelivery(t *testing.T) {
	rp := newReverseProgress(func(topic string) bool { return topic == "rev" }, false)
	p := newSessionPositions(nil, nil, 0, rp)
	k := tp{"rev", 0}
	rp.handled(k, 10)
	own := Coord{"rev", 0, 10}
	if !rp.LocalAcked(own) {
		t.Fatal("localAcked of a record of a consumed topic: false, want true")
	}
	if rp.LocalAcked(Coord{"fwd", 0, 3}) {
		t.Fatal("localAcked of a record of a topic the reverse path does not consume: true, want false")
	}
	rp.handled(k, 12) // skipped own 10, handed out 11
	p.sent(1, Coord{"rev", 0, 11}, 1)
	p.acked(1)
	at := func() int64 {
		for _, q := range p.snapshot() {
			if q.Topic == "rev" {
				return q.Offset
			}
		}
		return -1
	}
	if got := at(); got != 10 {
		t.Fatalf("position %d while own record 10 waits for its local delivery, want 10", got)
	}
	p.wentOffline()
	rp.LocalDelivered(own) // the session is gone: it did not get it
	if got := at(); got != 10 {
		t.Fatalf("position %d after the session went before own record 10 reached it, want 10", got)
	}
	if next, _, _ := rp.limit(k); next != 12 {
		t.Fatalf("reverse limit %d after the local delivery, want 12", next)
	}
}

// TestYieldedResendIsResentAgain: a replay that meets a pending delivery to
// resend (it came from the session's record) and then gives its slot up
// before writing it (its client's window stayed full: replay.go yield)
// puts the resend back: when it reads the record again it resends it
// under the same packet id, which stays reserved meanwhile, rather than
// delivering it anew while the record still lists that id as pending.
func TestYieldedResendIsResentAgain(t *testing.T) {
	c := Coord{"k", 0, 7}
	p := newSessionPositions([]state.Position{{Topic: "k", Partition: 0, Offset: 7}},
		[]state.Pending{{PacketID: 9, Topic: "k", Partition: 0, Offset: 7}}, 0, nil)
	pid, resend, skip := p.replayAction(c)
	if pid != 9 || !resend || skip {
		t.Fatalf("first meeting: pid %d resend %v skip %v, want a resend under 9", pid, resend, skip)
	}
	p.keepResend(c, pid)
	if !p.reserved(9) {
		t.Fatal("packet id 9 free for a new delivery while its resend waits")
	}
	if pid, resend, skip := p.replayAction(c); pid != 9 || !resend || skip {
		t.Fatalf("after the yield: pid %d resend %v skip %v, want the resend under 9 again", pid, resend, skip)
	}
	// Another record's coordinate under that id is not a resend of c.
	p.keepResend(Coord{"k", 0, 8}, 9)
	if _, resend, _ := p.replayAction(Coord{"k", 0, 8}); resend {
		t.Fatal("offset 8 resent under packet id 9, which is pending for offset 7")
	}
}

// hookWithSession is a session hook of a broker without listeners that owns
// the persistent session of client "dev" (not connected; no table).
func hookWithSession(t *testing.T) (*sessionHook, *ownedSession) {
	t.Helper()
	server := mqtt.New(&mqtt.Options{InlineClient: true})
	h := newSessionHook(testhelp.Logger(t), server, nil, "a", time.Second, nil)
	o := &ownedSession{cl: server.NewClient(nil, "t", "dev", false), pos: newSessionPositions(nil, nil, 0, nil)}
	h.owned["dev"] = o
	return h, o
}

// TestReadingPositionsLeavesThemDirty: the checkpoint writes positions
// that moved since the last record written with them. A replay reads
// them too (where its passes start, which topics it reads); that read
// used to clear the flag the checkpoint looks at, so the acknowledgements
// before it were not written until the next one (a crash meanwhile
// redelivered them). Only a write, once acknowledged, makes them clean,
// and only up to what it wrote.
func TestReadingPositionsLeavesThemDirty(t *testing.T) {
	p := newSessionPositions(nil, nil, 0, nil)
	p.sent(3, Coord{"k", 0, 7}, 1)
	p.acked(3)
	if !p.isDirty() {
		t.Fatal("an acknowledgement did not make the positions dirty")
	}
	if pos := p.snapshot(); len(pos) != 1 || pos[0].Offset != 8 { // a replay's read
		t.Fatalf("positions %+v, want offset 8", pos)
	}
	if !p.isDirty() {
		t.Fatal("reading the positions made them clean: the checkpoint skips the acknowledgement")
	}
	gen := p.generation() // a checkpoint's write begins
	_ = p.snapshot()
	p.sent(4, Coord{"k", 0, 8}, 1) // a delivery while the write is on its way
	p.wrote(gen)
	if !p.isDirty() {
		t.Fatal("a write made clean a change made after its snapshot")
	}
	p.wrote(p.generation())
	if p.isDirty() {
		t.Fatal("dirty after a write of every change")
	}
}

// TestPositionTopicsCoverTheSnapshot: a replay chooses the topics it
// reads from positions.topics; every topic snapshot has a position in must
// be among them, or the replay would not read a partition the session
// has messages waiting in.
func TestPositionTopicsCoverTheSnapshot(t *testing.T) {
	p := newSessionPositions([]state.Position{{Topic: "base", Partition: 0, Offset: 4, Delivered: 4}}, nil, 0, nil)
	p.sent(1, Coord{"pending", 2, 9}, 1)
	p.sent(2, Coord{"acked", 0, 3}, 1)
	p.acked(2)
	p.reading(tp{"frontier", 1}, 12)
	got := map[string]bool{}
	p.topics(func(s string) { got[s] = true })
	snap := p.snapshot()
	if len(snap) != 4 {
		t.Fatalf("snapshot %+v, want positions in base, pending, acked and frontier", snap)
	}
	for _, q := range snap {
		if !got[q.Topic] {
			t.Errorf("snapshot has a position in %q, topics does not name it (named: %v)", q.Topic, got)
		}
	}
}

// TestPendingKeepsQoSAndPubrec: a pending delivery's QoS and its PUBREC
// state go into the record and come back from it: the resume resends the
// PUBREL of a released one (and not its PUBLISH) and the others at the
// QoS they were sent with (issue 53 item 11, [MQTT-4.4.0-1]).
func TestPendingKeepsQoSAndPubrec(t *testing.T) {
	p := newSessionPositions(nil, nil, 0, nil)
	p.sent(1, Coord{"k", 0, 1}, 2)
	p.sent(2, Coord{"k", 0, 2}, 2)
	p.released(2)
	list := p.pendingList()
	want := []state.Pending{{PacketID: 1, Topic: "k", Offset: 1, QoS: 2}, {PacketID: 2, Topic: "k", Offset: 2, QoS: 2, Released: true}}
	if !slices.Equal(list, want) {
		t.Fatalf("pending written as %+v, want %+v", list, want)
	}
	q := newSessionPositions(nil, list, 0, nil)
	if got := q.takeReleased(); !slices.Equal(got, []uint16{2}) {
		t.Fatalf("released resends %v, want [2]", got)
	}
	if _, resend, skip := q.replayAction(Coord{"k", 0, 2}); resend || !skip {
		t.Fatalf("the released delivery's record: resend %v skip %v, want skipped (its PUBREL is in flight)", resend, skip)
	}
	if pid, resend, _ := q.replayAction(Coord{"k", 0, 1}); pid != 1 || !resend || q.resendQoS(1) != 2 {
		t.Fatalf("the unacknowledged one: pid %d resend %v at QoS %d, want a resend under 1 at QoS 2", pid, resend, q.resendQoS(1))
	}
}
