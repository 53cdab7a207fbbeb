package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/segmentio/kafka-go"

	"github.com/ferry-bridge/ferry/producer"
	"github.com/ferry-bridge/ferry/ringbuffer"
	"github.com/ferry-bridge/ferry/session"
	"github.com/ferry-bridge/ferry/topicmap"
)

// hook is the mochi hook that bridges accepted PUBLISH packets to Kafka.
//
// QoS 0: the record is put in the ring and mochi delivers to local
// subscribers at once.
//
// QoS 1: pipelined. The hook registers the publish in the connection's
// acknowledgement queue (acks.go), puts the record in the ring and tells
// mochi to stop there (ErrRejectPacket). When Kafka has acknowledged, the
// PUBACK is written (in the order the PUBLISHes arrived) and the message is
// delivered to local subscribers as if mochi had (local.go). A client may
// have up to mqtt.max_inflight publishes waiting at once.
//
// QoS 2: the hook waits for Kafka's acknowledgement and for its turn in the
// acknowledgement queue, then lets mochi send PUBREC and deliver; QoS 2 is
// rare enough that pipelining it is not worth re-implementing mochi's
// PUBREL/PUBCOMP state.
//
// Failures are never acknowledged: MQTT v5 clients get a reason code, v3.1.1
// clients are disconnected so that they resend. Every acknowledgement of a
// connection, positive or negative, leaves through its queue.
type hook struct {
	mqtt.HookBase
	cfg      Config
	log      *slog.Logger
	tm       *topicmap.Map
	ring     *ringbuffer.Ring[*producer.Record]
	metrics  *metrics
	server   *mqtt.Server
	logs     *rateLimiter
	producer *producer.Producer // ring eviction reports its failures to it

	seq    atomic.Uint64 // ferry.seq, when kafka.headers has it
	hdrs   *topicmap.HeaderBuilder
	queues sync.Map // *mqtt.Client -> *ackQueue
	locals *localPublishers
	// retained keeps retained messages in Kafka (nil: tests without state).
	retained *session.Retained
	// inj tells persistent sessions' positions where a delivered message
	// sits in Kafka (session/positions.go).
	inj *session.Injections
	// progress, when the reverse path and sessions run, holds persistent
	// sessions' positions at own records waiting for their local delivery.
	progress *session.ReverseProgress
	// demand, once reading on demand runs, is asked to read a topic before
	// this instance delivers its own record there (ensureRead).
	demand atomic.Pointer[demander]
}

// markSubscribed tells cl's acknowledgement queue that mochi writes
// deliveries to it (see ackQueue.subscribed).
func (h *hook) markSubscribed(cl *mqtt.Client) { h.queue(cl).subscribed.Store(true) }

// writeRetained records a retained publish's change in the retained table;
// done (may be nil) gets the outcome.
func (h *hook) writeRetained(cl *mqtt.Client, pk *packets.Packet, done func(error)) bool {
	if !pk.FixedHeader.Retain || h.retained == nil {
		return false
	}
	h.retained.Write(cl.ID, pk, done)
	return true
}

func (h *hook) ID() string { return "ferry-bridge" }

// Provides is asked once per hook method, when the hook is added (the
// patched mochi, FERRY.md change 4).
func (h *hook) Provides(b byte) bool {
	switch b {
	case mqtt.OnPublish, mqtt.OnSessionEstablished, mqtt.OnDisconnect, mqtt.OnPublishDropped, mqtt.OnSubscribe,
		mqtt.OnQosComplete, mqtt.OnQosDropped, mqtt.OnWillSent, mqtt.OnPublished:
		return true
	}
	return false
}

func (h *hook) OnSessionEstablished(cl *mqtt.Client, _ packets.Packet) {
	if cl.Net.Inline {
		return
	}
	h.metrics.connections.Inc()
	// Ferry counts the Receive Maximum itself (ackQueue.admit), QoS 1/2
	// only. mochi's own receive quota would refuse every PUBLISH, QoS 0
	// included, with 0x93 once mqtt.max_inflight accepted QoS 2 publishes
	// await PUBREL (or QoS 2 deliveries await PUBCOMP): never let it run
	// out. It is read before the first packet of the connection, and
	// Capabilities.ReceiveMaximum, announced in CONNACK, is unchanged.
	cl.State.Inflight.ResetReceiveQuota(math.MaxInt32)
	if cl.State.Subscriptions.Len() > 0 { // inherited from an earlier connection
		h.queue(cl).subscribed.Store(true)
	}
}

// OnSubscribe marks the connection as one mochi may write deliveries to
// from its own queue (see ackQueue.subscribed). It runs before the
// subscription exists.
func (h *hook) OnSubscribe(cl *mqtt.Client, pk packets.Packet) packets.Packet {
	if !cl.Net.Inline {
		h.queue(cl).subscribed.Store(true)
	}
	return pk
}

func (h *hook) OnDisconnect(cl *mqtt.Client, _ error, _ bool) {
	if !cl.Net.Inline {
		h.metrics.connections.Dec()
		if q, ok := h.queues.LoadAndDelete(cl); ok {
			h.releaseQoS2Floor(q.(*ackQueue))
			h.endInjection(cl, q.(*ackQueue))
		}
	}
}

// endInjection ends the injection of cl's QoS 2 publish, if one runs: the
// next injection under its client id waits for it (session.Injections).
func (h *hook) endInjection(cl *mqtt.Client, q *ackQueue) {
	if h.inj != nil && q.injecting.CompareAndSwap(true, false) {
		h.inj.End(cl.ID)
	}
}

// OnQosComplete: mochi has answered a client's PUBREL with PUBCOMP, which
// ends an accepted QoS 2 publish's count against the Receive Maximum.
// (It also fires for the acknowledgements of deliveries: other types.)
func (h *hook) OnQosComplete(cl *mqtt.Client, pk packets.Packet) {
	if pk.FixedHeader.Type == packets.Pubrel {
		h.qos2Done(cl)
	}
}

// OnQosDropped: a PUBREL with an error code ends that publish's count too.
func (h *hook) OnQosDropped(cl *mqtt.Client, pk packets.Packet) {
	if pk.FixedHeader.Type == packets.Pubrel {
		h.qos2Done(cl)
	}
}

func (h *hook) qos2Done(cl *mqtt.Client) {
	if q, ok := h.queues.Load(cl); ok {
		q.(*ackQueue).qos2Done()
	}
}

func (h *hook) OnPublishDropped(_ *mqtt.Client, _ packets.Packet) {
	h.metrics.subscriberDrops.Inc()
}

var qosLabel = [3]string{"0", "1", "2"}

// OnWillSent bridges a Will message that mochi has just published to local
// subscribers: mochi's sendLWT never passes a Will through OnPublish. Its
// client is gone, so nobody waits for an acknowledgement: the record goes the
// QoS 0 way (best effort, counted when dropped) and carries the Will's QoS
// and retain flag in its headers.
func (h *hook) OnWillSent(cl *mqtt.Client, pk packets.Packet) {
	h.writeRetained(cl, &pk, nil)
	route, err := h.tm.Forward(pk.TopicName)
	if errors.Is(err, topicmap.ErrExcluded) {
		return
	}
	if err != nil {
		h.metrics.drops.WithLabelValues("unmappable_topic").Inc()
		h.logs.Warn(pk.TopicName, "will not bridged: topic cannot be mapped to Kafka", "client", cl.ID, "topic", pk.TopicName, "err", err)
		return
	}
	h.enqueueQoS0(&h.newRecord(cl, pk, route, nil).Record)
}

// errRejectPacket is packets.ErrRejectPacket boxed once: returning the
// struct as an error boxes it anew, an allocation per QoS 1 publish (Ferry
// rejects each, to acknowledge it after Kafka).
var errRejectPacket error = packets.ErrRejectPacket

func (h *hook) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline {
		// Published by the reverse path or our own local delivery: never
		// bridged back to Kafka.
		h.locals.restore(cl, &pk)
		return pk, nil
	}
	qos := pk.FixedHeader.Qos
	h.metrics.publishes[qos].Inc()
	// A QoS 0 publisher keeps no per-connection state (no ackQueue): its
	// routes are not cached.
	var q *ackQueue
	var pc *pubCache
	if qos > 0 {
		q = h.queue(cl)
		if !q.admit() {
			h.logs.Warn(cl.ID, "disconnecting client: more unacknowledged QoS 1/2 publishes than the Receive Maximum", "client", cl.ID, "receive_maximum", h.cfg.MQTT.MaxInflight)
			_ = h.server.DisconnectClient(cl, packets.ErrReceiveMaximum) // [MQTT-3.3.4-9]
			return pk, errRejectPacket
		}
		pc = &q.pub
	}
	route, err := pc.forward(h.tm, pk.TopicName)
	if errors.Is(err, topicmap.ErrExcluded) {
		return h.notBridged(cl, pk)
	}
	if err != nil {
		h.metrics.drops.WithLabelValues("unmappable_topic").Inc()
		h.logs.Warn(pk.TopicName, "publish refused: topic cannot be mapped to Kafka", "client", cl.ID, "topic", pk.TopicName, "err", err)
		if qos > 0 {
			q.refuse(&pk, fmt.Errorf("%w: %v", ErrTopicRejected, err))
		}
		return pk, errRejectPacket
	}
	fr := h.newRecord(cl, pk, route, pc)
	rec := &fr.Record
	switch qos {
	case 0:
		h.writeRetained(cl, &pk, nil)
		h.enqueueQoS0(rec)
		return pk, nil
	case 1:
		h.publishQoS1(q, pk, fr)
		return pk, errRejectPacket
	default:
		if !h.publishQoS2(cl, &pk, rec) {
			return pk, errRejectPacket
		}
		if h.inj != nil {
			// mochi delivers it on this goroutine next; OnPublished ends it
			// (or OnDisconnect, when mochi fails the PUBREC's write first).
			h.inj.Begin(cl.ID, session.Coord{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset}, pk.TopicName)
			h.queue(cl).injecting.Store(true)
		}
		return pk, nil
	}
}

// OnPublished ends the delivery of an accepted QoS 2 publish.
func (h *hook) OnPublished(cl *mqtt.Client, pk packets.Packet) {
	if pk.FixedHeader.Qos != 2 || cl.Net.Inline {
		return
	}
	q := h.queue(cl)
	h.releaseQoS2Floor(q)
	if h.inj != nil {
		h.endInjection(cl, q)
	}
}

// newRecord builds the forward record of pk; pc, when not nil, is the
// publishing connection's cache (its topic and client id bytes are shared
// with its earlier records instead of copied).
func (h *hook) newRecord(cl *mqtt.Client, pk packets.Packet, route topicmap.Route, pc *pubCache) *fwdRecord {
	now := time.Now()
	std := topicmap.Standard{Topic: pk.TopicName, QoS: pk.FixedHeader.Qos, Retain: pk.FixedHeader.Retain,
		ClientID: cl.ID, Expiry: pk.Properties.MessageExpiryInterval}
	if pk.FixedHeader.Qos > 0 {
		std.PacketID = pk.PacketID
	}
	if h.hdrs.Set().Has(topicmap.HeaderSeq) {
		std.Seq = h.seq.Add(1)
	}
	fr := &fwdRecord{Record: producer.Record{Topic: route.Topic, Key: route.Key, Value: pk.Payload, Received: now}}
	hs := fr.hdrs[:0]
	if n := h.hdrs.Count(std) + len(route.Headers) + len(pk.Properties.User); n > len(fr.hdrs) {
		hs = make([]kafka.Header, 0, n)
	}
	var sb topicmap.StandardBytes
	if pc != nil {
		sb = pc.bytes(pk.TopicName, cl.ID)
	}
	hs = topicmap.AppendStandardBuf(h.hdrs, hs, fr.vals[:0], std, sb)
	for _, rh := range route.Headers {
		hs = append(hs, kafka.Header{Key: rh.Key, Value: rh.Value})
	}
	fr.Headers = h.appendUserProps(hs, pk.Properties.User)
	return fr
}

// fwdRecord is a forward record with room for its headers (the default set
// is at most 7) and their own values (packet id, sequence, expiry) and, for a
// QoS 1 publish, its place in the connection's acknowledgement queue: one
// allocation per message instead of four.
type fwdRecord struct {
	producer.Record
	hdrs [7]kafka.Header
	vals [40]byte
	ack  pending
}

// appendUserProps adds the client's MQTT v5 user properties as headers,
// through topicmap's header builder: names reserved for Ferry's own headers
// or set by a forward rule are dropped and counted, so a client cannot spoof
// them.
func (h *hook) appendUserProps(hs []kafka.Header, user []packets.UserProperty) []kafka.Header {
	if len(user) == 0 {
		return hs
	}
	var propBuf [8]topicmap.UserProperty
	var hdrBuf [8]topicmap.Header
	props := propBuf[:0]
	for _, up := range user {
		props = append(props, topicmap.UserProperty{Key: up.Key, Value: up.Val})
	}
	out, dropped := h.tm.UserPropsToHeaders(hdrBuf[:0], props)
	for _, uh := range out {
		hs = append(hs, kafka.Header{Key: uh.Key, Value: uh.Value})
	}
	if dropped > 0 {
		h.metrics.reservedPropsDropped.Add(float64(dropped))
	}
	return hs
}

func (h *hook) enqueueQoS0(rec *producer.Record) {
	switch h.cfg.Ring.QoS0Policy {
	case "drop-oldest":
		old, evicted, err := h.ring.PushEvict(rec)
		if evicted {
			// The oldest record may be a QoS 1 publish still waiting: it is
			// refused to its client, never silently lost.
			// Later records of its key still in the ring fail too
			// (producer.Failed), so none of them overtakes it.
			h.metrics.drops.WithLabelValues("ring_evicted").Inc()
			old.Complete(fmt.Errorf("%w: evicted by a newer QoS 0 message", ErrRingFull))
			h.producer.Failed(old, time.Now())
		}
		if err != nil {
			h.metrics.drops.WithLabelValues("closed").Inc()
		}
	case "block":
		ctx, cancel := context.WithTimeout(context.Background(), h.cfg.Kafka.AckTimeout)
		defer cancel()
		if err := h.ring.Push(ctx, rec); err != nil {
			h.metrics.drops.WithLabelValues("ring_full").Inc()
		}
	default:
		if !h.ring.TryPush(rec) {
			h.metrics.drops.WithLabelValues("ring_full").Inc()
		}
	}
}

// push waits for room in the ring until the record's deadline.
func (h *hook) push(rec *producer.Record) error {
	if h.ring.TryPush(rec) {
		return nil
	}
	ctx, cancel := context.WithDeadline(context.Background(), rec.Deadline)
	defer cancel()
	if err := h.ring.Push(ctx, rec); err != nil {
		if errors.Is(err, ringbuffer.ErrClosed) {
			return fmt.Errorf("%w: %v", ErrClosed, err)
		}
		return fmt.Errorf("%w for %s", ErrRingFull, h.cfg.Kafka.AckTimeout)
	}
	return nil
}

func (h *hook) publishQoS1(q *ackQueue, pk packets.Packet, fr *fwdRecord) {
	cl, rec := q.cl, &fr.Record
	rec.Deadline = rec.Received.Add(h.cfg.Kafka.AckTimeout)
	// Bound the pipeline: wait for a slot as long as the client would wait
	// for its acknowledgement anyway. (An MQTT v5 client never waits here:
	// it is held to the Receive Maximum instead, see ackQueue.add.)
	select {
	case q.slots <- struct{}{}:
	default:
		t := time.NewTimer(time.Until(rec.Deadline))
		select {
		case q.slots <- struct{}{}:
			t.Stop()
		case <-t.C:
			q.refuse(&pk, fmt.Errorf("%w: %d publishes already wait for Kafka", ErrRingFull, cap(q.slots)))
			return
		}
	}
	p := &fr.ack
	p.slot = true
	p.local = keepLocal(cl, &pk)
	q.enqueue(p, &pk)
	rec.Done = func(err error) {
		p.coord = session.Coord{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset}
		// Whether anyone here could receive it is decided now, not when it
		// arrived: a session resumed here meanwhile, whose replay listed
		// the partition's end before this acknowledgement, gets it from
		// neither path otherwise (TestResumeGetsAPublishKafkaAcknowledgedAfterItsReplay).
		// A session whose replay read it too gets the live delivery
		// discarded as a copy (replay_copies.go).
		if err == nil && h.mayDeliverLocally(p.local.fh.Retain) {
			p.deliver = true
			p.floor = h.progress.LocalAcked(p.coord)
		}
		q.complete(p, err)
	}
	if pk.FixedHeader.Retain && h.retained != nil {
		// The PUBACK waits for the retained record too.
		rec.Done = joinDone(2, rec.Done)
		h.writeRetained(cl, &pk, rec.Done)
	}
	if err := h.push(rec); err != nil {
		rec.Complete(err)
	}
}

// mayDeliverLocally reports whether anyone here could receive a publish
// Kafka has just acknowledged: a subscription exists, a replay runs (it
// may put one live) or it is retained. Re-injecting every packet costs a
// fifth of the CPU when nobody subscribes. Asked after the acknowledgement,
// a "no" is safe: a subscription that goes live later is followed by its
// replay's last pass, which lists the partition's end after it.
func (h *hook) mayDeliverLocally(retain bool) bool {
	return retain || atomic.LoadInt64(&h.server.Info.Subscriptions) > 0 ||
		h.inj != nil && h.inj.Replaying()
}

// publishQoS2 waits until Kafka has acknowledged the record and every
// acknowledgement before this one has been written; true lets mochi write
// the PUBREC and deliver. A refusal has then been written by the queue.
//
// Like a QoS 1 publish's, the record holds the reverse path's progress
// from Kafka's acknowledgement until mochi has delivered it here
// (session/reverse_progress.go): from its turn on, mochi delivers it after the
// PUBREC, and OnPublished (or OnDisconnect, when that write fails) lets go.
func (h *hook) publishQoS2(cl *mqtt.Client, pk *packets.Packet, rec *producer.Record) bool {
	q := h.queue(cl)
	rec.Deadline = rec.Received.Add(h.cfg.Kafka.AckTimeout)
	p := q.add(pk)
	p.turn = make(chan error, 1)
	retain := pk.FixedHeader.Retain
	var mu sync.Mutex       // orders done's hold against a turn that never came
	var held *session.Coord // the record holding the reverse path's progress
	abandoned := false
	rec.Done = func(err error) {
		mu.Lock()
		if c := (session.Coord{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset}); err == nil && !abandoned &&
			h.mayDeliverLocally(retain) && h.progress.LocalAcked(c) {
			held = &c
		}
		mu.Unlock()
		q.complete(p, err)
	}
	if pk.FixedHeader.Retain && h.retained != nil {
		rec.Done = joinDone(2, rec.Done)
		h.writeRetained(cl, pk, rec.Done)
	}
	if err := h.push(rec); err != nil {
		rec.Complete(err)
	}
	ok := h.waitTurn(cl, pk, p, rec.Deadline)
	mu.Lock()
	defer mu.Unlock()
	switch {
	case !ok:
		abandoned = true
		if held != nil { // no delivery follows
			h.progress.LocalDelivered(*held)
		}
	case held != nil:
		h.ensureRead(held.Topic, pk.TopicName)
		q.qos2Floor.Store(held)
	}
	return ok
}

// ensureRead makes reading on demand read Kafka topic k before this
// instance delivers there its own record of MQTT topic m (demander.ensure).
func (h *hook) ensureRead(k, m string) {
	if d := h.demand.Load(); d != nil {
		// Bounded: the publisher's acknowledgements wait for it. Past it the
		// topic is read at the demand loop's next round; a session that went
		// meanwhile has no position there and gets it again on its resume.
		ctx, cancel := context.WithTimeout(context.Background(), ensureTimeout)
		defer cancel()
		d.ensure(ctx, k, m)
	}
}

// ensureTimeout bounds ensureRead (two Kafka requests, once per topic).
const ensureTimeout = 2 * time.Second

// releaseQoS2Floor ends the hold of cl's QoS 2 publish on the reverse
// path's progress once mochi has delivered it (or its connection failed).
func (h *hook) releaseQoS2Floor(q *ackQueue) {
	if c := q.qos2Floor.Swap(nil); c != nil {
		h.progress.LocalDelivered(*c)
	}
}

// waitTurn waits until a QoS 2 publish is settled and every acknowledgement
// before it has been written. The lane fails a record at its deadline; the
// extra second covers a produce request already on the wire.
func (h *hook) waitTurn(cl *mqtt.Client, pk *packets.Packet, p *pending, deadline time.Time) bool {
	t := time.NewTimer(time.Until(deadline) + time.Second)
	defer t.Stop()
	select {
	case err := <-p.turn:
		return err == nil
	case <-t.C:
		// The producer broke its promise to settle every record by its
		// deadline: the order of acknowledgements can no longer be kept, so
		// the client reconnects and resends.
		h.logs.Warn(cl.ID, "disconnecting client: QoS 2 publish not settled in time", "client", cl.ID, "topic", pk.TopicName)
		cl.Stop(fmt.Errorf("%w: no acknowledgement within %s", ErrKafkaUnavailable, h.cfg.Kafka.AckTimeout))
		return false
	}
}

// notBridged handles a publish on an excluded topic: local only, but its
// acknowledgement still waits for those of the publishes before it.
func (h *hook) notBridged(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	switch pk.FixedHeader.Qos {
	case 0:
		h.writeRetained(cl, &pk, nil)
		return pk, nil
	case 1:
		q := h.queue(cl)
		p := q.add(&pk)
		p.local, p.deliver = keepLocal(cl, &pk), true
		if !h.writeRetained(cl, &pk, func(err error) { q.complete(p, err) }) {
			q.complete(p, nil)
		}
		return pk, errRejectPacket
	default:
		q := h.queue(cl)
		p := q.add(&pk)
		p.turn = make(chan error, 1)
		if !h.writeRetained(cl, &pk, func(err error) { q.complete(p, err) }) {
			q.complete(p, nil)
		}
		if !h.waitTurn(cl, &pk, p, time.Now().Add(h.cfg.Kafka.AckTimeout)) {
			return pk, errRejectPacket
		}
		return pk, nil
	}
}

func (h *hook) queue(cl *mqtt.Client) *ackQueue {
	if q, ok := h.queues.Load(cl); ok {
		return q.(*ackQueue)
	}
	q, _ := h.queues.LoadOrStore(cl, newAckQueue(h, cl))
	return q.(*ackQueue)
}

func reasonCode(err error) packets.Code {
	switch {
	case errors.Is(err, ErrTopicRejected):
		return packets.ErrTopicNameInvalid
	case errors.Is(err, ErrRingFull):
		return packets.ErrQuotaExceeded
	case errors.Is(err, ErrTooLarge):
		return packets.ErrPacketTooLarge
	}
	return packets.ErrUnspecifiedError
}

func nackReason(err error) string {
	switch {
	case errors.Is(err, ErrTopicRejected):
		return "topic_rejected"
	case errors.Is(err, ErrRingFull):
		return "ring_full"
	case errors.Is(err, ErrTooLarge):
		return "too_large"
	case errors.Is(err, ErrClosed):
		return "shutdown"
	case errors.Is(err, ErrKafkaRejected):
		return "kafka_rejected"
	}
	return "kafka_unavailable"
}
