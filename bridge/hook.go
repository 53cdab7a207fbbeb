package bridge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/segmentio/kafka-go"

	"github.com/ferry-bridge/ferry/ringbuffer"
	"github.com/ferry-bridge/ferry/topicmap"
)

// hook is the mochi hook that bridges accepted PUBLISH packets to Kafka.
//
// QoS 0: the record is put in the ring and mochi delivers to local
// subscribers at once.
//
// QoS 1: pipelined. The hook registers the publish in the client's in-order
// acknowledgement queue, puts the record in the ring and tells mochi to stop
// there (ErrRejectPacket). When Kafka has acknowledged, the PUBACK is
// written (in the order the PUBLISHes arrived) and the message is delivered
// to local subscribers through the inline client. A client may have up to
// mqtt.max_inflight publishes waiting at once.
//
// QoS 2: the hook waits for Kafka's acknowledgement, then lets mochi send
// PUBREC and deliver; QoS 2 is rare enough that pipelining it is not worth
// re-implementing mochi's PUBREL/PUBCOMP state.
//
// Failures are never acknowledged: MQTT v5 clients get a reason code, v3.1.1
// clients are disconnected so that they resend.
type hook struct {
	mqtt.HookBase
	cfg     Config
	log     *slog.Logger
	tm      *topicmap.Map
	ring    *ringbuffer.Ring[*record]
	metrics *metrics
	server  *mqtt.Server
	logs    *rateLimiter
	order   *keyOrder // the producer's per-key order; ring eviction reports to it

	seq      atomic.Uint64
	origin   []byte
	sessions sync.Map // *mqtt.Client -> *session
}

func (h *hook) ID() string { return "ferry-bridge" }

func (h *hook) Provides(b byte) bool {
	return bytes.Contains([]byte{mqtt.OnPublish, mqtt.OnSessionEstablished, mqtt.OnDisconnect, mqtt.OnPublishDropped}, []byte{b})
}

func (h *hook) OnSessionEstablished(cl *mqtt.Client, _ packets.Packet) {
	if !cl.Net.Inline {
		h.metrics.connections.Inc()
	}
}

func (h *hook) OnDisconnect(cl *mqtt.Client, _ error, _ bool) {
	if !cl.Net.Inline {
		h.metrics.connections.Dec()
		h.sessions.Delete(cl)
	}
}

func (h *hook) OnPublishDropped(_ *mqtt.Client, _ packets.Packet) {
	h.metrics.subscriberDrops.Inc()
}

var qosLabel = [3]string{"0", "1", "2"}

func (h *hook) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline {
		// Published by the reverse path or our own local delivery: never
		// bridged back to Kafka.
		return pk, nil
	}
	qos := pk.FixedHeader.Qos
	h.metrics.publishes[qos].Inc()
	route, err := h.tm.Forward(pk.TopicName)
	if errors.Is(err, topicmap.ErrExcluded) {
		return pk, nil
	}
	if err != nil {
		h.metrics.drops.WithLabelValues("unmappable_topic").Inc()
		h.logs.Warn(pk.TopicName, "publish refused: topic cannot be mapped to Kafka", "client", cl.ID, "topic", pk.TopicName, "err", err)
		h.refuse(cl, pk.FixedHeader.Qos, pk.PacketID, pk.TopicName, fmt.Errorf("%w: %v", ErrTopicRejected, err))
		return pk, packets.ErrRejectPacket
	}
	rec := h.newRecord(cl, pk, route)
	switch qos {
	case 0:
		h.enqueueQoS0(rec)
		return pk, nil
	case 1:
		h.publishQoS1(cl, pk, rec)
		return pk, packets.ErrRejectPacket
	default:
		if err := h.publishQoS2(rec); err != nil {
			h.refuse(cl, 2, pk.PacketID, pk.TopicName, err)
			return pk, packets.ErrRejectPacket
		}
		return pk, nil
	}
}

func (h *hook) newRecord(cl *mqtt.Client, pk packets.Packet, route topicmap.Route) *record {
	now := time.Now()
	hs := make([]kafka.Header, 0, 6+len(route.Headers)+len(pk.Properties.User))
	hs = append(hs,
		kafka.Header{Key: topicmap.HeaderMQTTTopic, Value: []byte(pk.TopicName)},
		kafka.Header{Key: topicmap.HeaderQoS, Value: []byte(qosLabel[pk.FixedHeader.Qos])},
		kafka.Header{Key: topicmap.HeaderClientID, Value: []byte(cl.ID)},
		kafka.Header{Key: topicmap.HeaderOrigin, Value: h.origin},
		kafka.Header{Key: topicmap.HeaderSeq, Value: strconv.AppendUint(nil, h.seq.Add(1), 10)},
	)
	if pk.FixedHeader.Qos > 0 {
		hs = append(hs, kafka.Header{Key: topicmap.HeaderPacketID, Value: strconv.AppendUint(nil, uint64(pk.PacketID), 10)})
	}
	if pk.FixedHeader.Retain {
		hs = append(hs, kafka.Header{Key: topicmap.HeaderRetain, Value: []byte("true")})
	}
	for _, rh := range route.Headers {
		hs = append(hs, kafka.Header{Key: rh.Key, Value: rh.Value})
	}
	for _, up := range pk.Properties.User {
		hs = append(hs, kafka.Header{Key: up.Key, Value: []byte(up.Val)})
	}
	return &record{topic: route.Topic, key: route.Key, value: pk.Payload, headers: hs, received: now}
}

func (h *hook) enqueueQoS0(rec *record) {
	switch h.cfg.Ring.QoS0Policy {
	case "drop-oldest":
		old, evicted, err := h.ring.PushEvict(rec)
		if evicted {
			// The oldest record may be a QoS 1 publish still waiting: it is
			// refused to its client, never silently lost.
			// Later records of its key still in the ring fail too (keyOrder),
			// so none of them overtakes it.
			h.metrics.drops.WithLabelValues("ring_evicted").Inc()
			old.complete(fmt.Errorf("%w: evicted by a newer QoS 0 message", ErrRingFull))
			h.order.fail(old, time.Now())
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
func (h *hook) push(rec *record) error {
	if h.ring.TryPush(rec) {
		return nil
	}
	ctx, cancel := context.WithDeadline(context.Background(), rec.deadline)
	defer cancel()
	if err := h.ring.Push(ctx, rec); err != nil {
		if errors.Is(err, ringbuffer.ErrClosed) {
			return fmt.Errorf("%w: %v", ErrClosed, err)
		}
		return fmt.Errorf("%w for %s", ErrRingFull, h.cfg.Kafka.AckTimeout)
	}
	return nil
}

func (h *hook) publishQoS1(cl *mqtt.Client, pk packets.Packet, rec *record) {
	s := h.session(cl)
	rec.deadline = rec.received.Add(h.cfg.Kafka.AckTimeout)
	// Bound the pipeline: wait for a slot as long as the client would wait
	// for its acknowledgement anyway.
	select {
	case s.slots <- struct{}{}:
	default:
		t := time.NewTimer(time.Until(rec.deadline))
		select {
		case s.slots <- struct{}{}:
			t.Stop()
		case <-t.C:
			h.refuse(cl, 1, pk.PacketID, pk.TopicName, fmt.Errorf("%w: %d publishes already wait for Kafka", ErrRingFull, cap(s.slots)))
			return
		}
	}
	p := &pending{id: pk.PacketID, topic: pk.TopicName}
	// Keep the packet for local delivery only when someone could receive it
	// (a subscription exists or it is retained): holding and re-injecting
	// every packet costs a fifth of the CPU when nobody subscribes.
	if pk.FixedHeader.Retain || atomic.LoadInt64(&h.server.Info.Subscriptions) > 0 {
		p.local = &pk
	}
	s.mu.Lock()
	s.queue = append(s.queue, p)
	s.mu.Unlock()
	rec.done = func(err error) { s.complete(p, err) }
	if err := h.push(rec); err != nil {
		rec.complete(err)
	}
}

func (h *hook) publishQoS2(rec *record) error {
	rec.deadline = rec.received.Add(h.cfg.Kafka.AckTimeout)
	done := make(chan error, 1)
	rec.done = func(err error) { done <- err }
	if err := h.push(rec); err != nil {
		return err
	}
	// The lane fails the record at its deadline; the extra second covers a
	// produce request already on the wire.
	t := time.NewTimer(time.Until(rec.deadline) + time.Second)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("%w: no acknowledgement within %s", ErrKafkaUnavailable, h.cfg.Kafka.AckTimeout)
	}
}

// refuse tells the client that a QoS>0 publish was not accepted: a reason
// code for MQTT v5, a disconnect for v3.1.1 (which has no negative ack). A
// refused QoS 0 publish is only counted.
func (h *hook) refuse(cl *mqtt.Client, qos byte, packetID uint16, topic string, err error) {
	if qos == 0 {
		return
	}
	code := reasonCode(err)
	h.metrics.nacks.WithLabelValues(nackReason(err)).Inc()
	if cl.Properties.ProtocolVersion == 5 && code != packets.ErrPacketTooLarge {
		ackType := packets.Puback
		if qos == 2 {
			ackType = packets.Pubrec
		}
		ack := packets.Packet{
			FixedHeader: packets.FixedHeader{Type: ackType},
			PacketID:    packetID,
			ReasonCode:  code.Code,
			Properties:  packets.Properties{ReasonString: err.Error()},
		}
		if werr := cl.WritePacket(ack); werr != nil {
			h.log.Debug("writing negative ack", "client", cl.ID, "err", werr)
		}
		return
	}
	h.logs.Warn(cl.ID, "disconnecting client: publish not accepted by Kafka", "client", cl.ID, "topic", topic, "err", err)
	if cl.Properties.ProtocolVersion == 5 {
		_ = h.server.DisconnectClient(cl, code)
		return
	}
	cl.Stop(err)
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

func (h *hook) session(cl *mqtt.Client) *session {
	if s, ok := h.sessions.Load(cl); ok {
		return s.(*session)
	}
	s, _ := h.sessions.LoadOrStore(cl, &session{h: h, cl: cl, slots: make(chan struct{}, h.cfg.MQTT.MaxInflight)})
	return s.(*session)
}

// session orders the acknowledgements of one connection: Kafka may confirm
// records of different partitions out of order, but PUBACKs leave in the
// order the PUBLISHes arrived.
type session struct {
	h     *hook
	cl    *mqtt.Client
	slots chan struct{}

	mu       sync.Mutex
	queue    []*pending
	draining bool
}

type pending struct {
	id    uint16
	topic string
	local *packets.Packet // for local delivery; nil when nobody subscribes
	done  bool
	err   error
}

func (s *session) complete(p *pending, err error) {
	s.mu.Lock()
	p.done, p.err = true, err
	start := !s.draining && len(s.queue) > 0 && s.queue[0].done
	if start {
		s.draining = true
	}
	s.mu.Unlock()
	if start {
		// A goroutine of its own: a slow client socket must not hold up the
		// Kafka sender that completed the record.
		go s.drain()
	}
}

func (s *session) drain() {
	var buf bytes.Buffer
	for {
		s.mu.Lock()
		n := 0
		for n < len(s.queue) && s.queue[n].done {
			n++
		}
		if n == 0 {
			s.draining = false
			s.mu.Unlock()
			return
		}
		ready := append([]*pending(nil), s.queue[:n]...)
		clear(s.queue[:n])
		s.queue = s.queue[n:]
		s.mu.Unlock()
		buf.Reset()
		for _, p := range ready {
			s.finish(p, &buf)
		}
		s.flush(&buf)
		for range ready {
			<-s.slots
		}
	}
}

// finish delivers an accepted publish locally and encodes its PUBACK into
// buf, or refuses a failed one (after flushing the PUBACKs before it, to
// keep the order).
func (s *session) finish(p *pending, buf *bytes.Buffer) {
	h := s.h
	if p.err != nil {
		s.flush(buf)
		h.refuse(s.cl, 1, p.id, p.topic, p.err)
		return
	}
	if p.local != nil {
		h.deliverLocal(*p.local)
	}
	ack := packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Puback},
		PacketID:        p.id,
		ReasonCode:      packets.CodeSuccess.Code,
		ProtocolVersion: s.cl.Properties.ProtocolVersion,
	}
	if err := ack.PubackEncode(buf); err != nil {
		h.log.Debug("encoding puback", "client", s.cl.ID, "err", err)
	}
}

// flush writes the encoded PUBACKs with one system call: one write per
// PUBACK was a quarter of the CPU under load. The client lock orders it
// with mochi's own writes to this connection.
func (s *session) flush(buf *bytes.Buffer) {
	if buf.Len() == 0 {
		return
	}
	defer buf.Reset()
	if s.cl.Closed() || s.cl.Net.Conn == nil {
		return
	}
	s.cl.Lock()
	_, err := s.cl.Net.Conn.Write(buf.Bytes())
	s.cl.Unlock()
	if err != nil {
		s.h.log.Debug("writing pubacks", "client", s.cl.ID, "err", err)
	}
}

// deliverLocal hands an accepted QoS 1 publish to this broker's own
// subscribers (and the retained store) through the inline client, which the
// hook never bridges.
func (h *hook) deliverLocal(pk packets.Packet) {
	inline, ok := h.server.Clients.Get(mqtt.InlineClientId)
	if !ok {
		return
	}
	out := pk.Copy(false)
	out.PacketID = 1
	if err := h.server.InjectPacket(inline, out); err != nil {
		h.log.Debug("local delivery", "topic", pk.TopicName, "err", err)
	}
}
