package reverse

import (
	"bytes"
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ferry-bridge/ferry/session"
)

// InflightOrder keeps redelivery in the original order per subscriber. It
// is a mochi hook the bridge adds whether or not the reverse path runs (it
// orders every QoS 1/2 delivery, the forward path's local ones and the
// session engine's replays too); the consumer reads from it what is still
// in flight to clean sessions (the commit rule: committer) and delivers
// through its gate.
//
// mochi resends a resumed session's in-flight messages sorted by
// uint16(Created), the creation second (Inflight.GetAll, an unstable sort
// over a map): messages created in the same second come back in random
// order. This hook gives every QoS 1/2 delivery a sequence number when mochi
// puts it in flight (OnQosPublish with DUP clear), and
// when a session resumes (OnSessionEstablish, before mochi copies and resends
// the in-flight messages) it rewrites their Created fields to consecutive
// seconds in sequence order, so that mochi's own sort yields that order; the
// resend sets DUP. Created no longer decides any expiry (mochi change 10
// (expiry): a message expires by the Expiry its publisher asked), so the
// rewrite moves none.
//
// A session takeover also has a window in which a delivery could land on the
// old connection after its messages were copied (and be dropped with it) or
// on the new one before the resend (and overtake it). The reverse path closes
// it for its own deliveries: it delivers inside enter/leave, and a resuming
// client's topics wait until OnSessionEstablished (at most resumeGateMax).
// Deliveries from MQTT publishers on this instance are not gated.
type InflightOrder struct {
	mqtt.HookBase
	server *mqtt.Server

	mu   sync.Mutex
	next uint64
	seqs map[string]*clientSeqs

	gate      sync.Mutex           // held by the reverse path around one delivery
	resuming  map[string]time.Time // under gate: clients between establish and established
	nresuming atomic.Int32
}

// clientSeqs are one client's in-flight sequences.
type clientSeqs struct {
	stored bool              // a persistent session (kept by the store, when there is one)
	m      map[uint16]uint64 // packet id -> sequence
}

// resumeGateMax bounds how long the reverse path holds a resuming client's
// topics (a connection that fails before its CONNACK never reports back).
const resumeGateMax = 2 * time.Second

// NewInflightOrder builds the hook; add it to server after the session
// engine's.
func NewInflightOrder(server *mqtt.Server) *InflightOrder {
	return &InflightOrder{server: server, seqs: make(map[string]*clientSeqs), resuming: make(map[string]time.Time)}
}

func (o *InflightOrder) ID() string { return "ferry-inflight-order" }

func (o *InflightOrder) Provides(b byte) bool {
	return bytes.Contains([]byte{mqtt.OnQosPublish, mqtt.OnQosComplete, mqtt.OnQosDropped,
		mqtt.OnSessionEstablish, mqtt.OnSessionEstablished, mqtt.OnDisconnect}, []byte{b})
}

// OnQosPublish numbers a new delivery; a resend (DUP) keeps its number.
func (o *InflightOrder) OnQosPublish(cl *mqtt.Client, pk packets.Packet, _ int64, _ int) {
	if cl.Net.Inline {
		return
	}
	o.number(cl, pk.PacketID, pk.FixedHeader.Type != packets.Publish || pk.FixedHeader.Dup)
}

// PutInFlight numbers a delivery the session engine's replay put in cl's
// in-flight store itself (session.Deliverer): mochi reports those to no
// hook, and an unnumbered packet would be resent after the numbered ones in
// random order.
func (o *InflightOrder) PutInFlight(cl *mqtt.Client, pid uint16) { o.number(cl, pid, false) }

// TakenOutOfFlight forgets a delivery that left cl's in-flight store
// without an acknowledgement (session.Deliverer).
func (o *InflightOrder) TakenOutOfFlight(cl *mqtt.Client, pid uint16) { o.complete(cl, pid) }

// number gives delivery pid of cl the next sequence number; keep leaves a
// numbered one (a resend, a PUBREL) as it is.
func (o *InflightOrder) number(cl *mqtt.Client, pid uint16, keep bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := o.client(cl.ID)
	c.stored = session.Persistent(cl)
	if _, ok := c.m[pid]; ok && keep {
		return
	}
	o.next++
	c.m[pid] = o.next
}

// client returns id's sequences, created if needed; under mu.
func (o *InflightOrder) client(id string) *clientSeqs {
	c := o.seqs[id]
	if c == nil {
		c = &clientSeqs{m: make(map[uint16]uint64)}
		o.seqs[id] = c
	}
	return c
}

// OnQosComplete ends a delivery the client acknowledged (PUBACK, PUBCOMP;
// see session.ClientAck).
func (o *InflightOrder) OnQosComplete(cl *mqtt.Client, pk packets.Packet) {
	if session.ClientAck(&pk) {
		o.complete(cl, pk.PacketID)
	}
}

func (o *InflightOrder) OnQosDropped(cl *mqtt.Client, pk packets.Packet) { o.complete(cl, pk.PacketID) }

func (o *InflightOrder) complete(cl *mqtt.Client, pid uint16) {
	if cl.IsTakenOver() {
		return // the messages moved to the new connection, same id
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if c := o.seqs[cl.ID]; c != nil {
		delete(c.m, pid)
		if len(c.m) == 0 {
			delete(o.seqs, cl.ID)
		}
	}
}

func (o *InflightOrder) OnDisconnect(cl *mqtt.Client, _ error, expire bool) {
	if cl.IsTakenOver() {
		return
	}
	if expire {
		o.mu.Lock()
		delete(o.seqs, cl.ID)
		o.mu.Unlock()
	}
	o.gate.Lock()
	o.unresume(cl.ID)
	o.gate.Unlock()
}

// last is the sequence of the latest delivery put in flight.
func (o *InflightOrder) last() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.next
}

// oldestVolatile is the lowest sequence still in flight to a client whose
// session is not stored (clean session), or the maximum when there is none:
// every delivery numbered below it is acknowledged or stored.
func (o *InflightOrder) oldestVolatile() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	oldest := ^uint64(0)
	for _, c := range o.seqs {
		if c.stored {
			continue
		}
		for _, s := range c.m {
			oldest = min(oldest, s)
		}
	}
	return oldest
}

// OnSessionEstablish runs before mochi inherits an existing session: it
// gates the reverse path for this client and renumbers the old session's
// in-flight messages so that mochi resends them in delivery order.
func (o *InflightOrder) OnSessionEstablish(cl *mqtt.Client, pk packets.Packet) {
	if pk.Connect.Clean {
		return
	}
	existing, ok := o.server.Clients.Get(cl.ID)
	if !ok {
		return
	}
	o.gate.Lock()
	defer o.gate.Unlock()
	o.resuming[cl.ID] = time.Now()
	o.nresuming.Store(int32(len(o.resuming)))
	o.renumber(existing, time.Now().Unix())
}

func (o *InflightOrder) OnSessionEstablished(cl *mqtt.Client, _ packets.Packet) {
	if o.nresuming.Load() == 0 {
		return
	}
	o.gate.Lock()
	o.unresume(cl.ID)
	o.gate.Unlock()
}

// unresume ends a client's gate; under gate.
func (o *InflightOrder) unresume(id string) {
	if _, ok := o.resuming[id]; ok {
		delete(o.resuming, id)
		o.nresuming.Store(int32(len(o.resuming)))
	}
}

// renumber sets Created of cl's in-flight packets to consecutive values in
// sequence order, below now, without crossing a multiple of 65536 (mochi
// compares uint16(Created)).
func (o *InflightOrder) renumber(cl *mqtt.Client, now int64) {
	pks := cl.State.Inflight.GetAll(false)
	if len(pks) == 0 {
		return
	}
	o.mu.Lock()
	var m map[uint16]uint64
	if c := o.seqs[cl.ID]; c != nil {
		m = c.m
	}
	seq := func(p packets.Packet) uint64 {
		if s, ok := m[p.PacketID]; ok {
			return s
		}
		return ^uint64(0) // unknown: after the known ones
	}
	slices.SortStableFunc(pks, func(a, b packets.Packet) int { return cmp.Compare(seq(a), seq(b)) })
	o.mu.Unlock()
	n := int64(len(pks))
	base := now - n - 1
	if lo := base & 0xffff; lo+n > 0x10000 {
		base -= lo + n - 0x10000
	}
	for i, p := range pks {
		p.Created = base + int64(i)
		cl.State.Inflight.Set(p)
	}
}

// enter is called by the reverse path before it delivers to topic; it waits
// while a subscriber of topic is resuming its session. leave must follow.
func (o *InflightOrder) enter(ctx context.Context, topic string) {
	o.gate.Lock()
	for o.nresuming.Load() > 0 && o.resumingSubscriber(topic) && ctx.Err() == nil {
		o.gate.Unlock()
		t := time.NewTimer(time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		o.gate.Lock()
	}
}

func (o *InflightOrder) leave() { o.gate.Unlock() }

// resumingSubscriber: under gate; drops entries older than resumeGateMax.
func (o *InflightOrder) resumingSubscriber(topic string) bool {
	now := time.Now()
	for id, since := range o.resuming {
		if now.Sub(since) > resumeGateMax {
			o.unresume(id)
		}
	}
	if len(o.resuming) == 0 {
		return false
	}
	subs := o.server.Topics.Subscribers(topic)
	for id := range subs.Subscriptions {
		if _, ok := o.resuming[id]; ok {
			return true
		}
	}
	for _, group := range subs.Shared {
		for id := range group {
			if _, ok := o.resuming[id]; ok {
				return true
			}
		}
	}
	return false
}
