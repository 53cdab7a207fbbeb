package bridge

import (
	"bytes"
	"sync"
	"sync/atomic"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ferry-bridge/ferry/internal/mqttconn"
	"github.com/ferry-bridge/ferry/session"
)

// ackQueue orders the acknowledgements of one connection. Kafka may settle
// records of different partitions out of order, and a refusal (unmappable
// topic, full pipeline) is known at once, but every PUBACK and PUBREC,
// positive or negative, leaves in the order the PUBLISHes arrived: each QoS
// 1/2 publish takes its place in the queue when it arrives, and one drainer
// at a time writes the settled head of the queue.
//
// Writes are ordered with mochi's own writes to the connection. mochi
// writes under the client's lock, straight to the socket, except while
// deliveries wait in the client's outbound queue: then it keeps bytes in a
// private buffer until the queue is empty. That can only happen to a
// connection that has subscribed. So a connection that never subscribed
// gets its PUBACKs encoded into one buffer and written under the client's
// lock (one system call per batch, the hot path of publish-only devices);
// one that has subscribed gets them through mochi's own WritePacket, with
// the socket corked for the batch (still one system call per batch).
//
// MQTT v5 clients are held to the server's Receive Maximum
// (mqtt.max_inflight): a QoS 1/2 publish counts from its arrival until its
// PUBACK (or negative PUBREC) is about to be written, an accepted QoS 2 publish until
// mochi has answered its PUBREL; one more is a protocol error (DISCONNECT
// 0x93). Ferry counts itself because a pipelined publish never reaches
// mochi's own accounting (and mochi's would refuse a QoS 0 publish at the
// limit too). MQTT 3.1.1 has no Receive Maximum: a client that pipelines
// more than mqtt.max_inflight waits for a slot instead (back pressure on its
// connection).
type ackQueue struct {
	h     *hook
	cl    *mqtt.Client
	slots chan struct{} // QoS 1 pipeline depth (MQTT 3.1.1 back pressure)

	// receiveMax is the Receive Maximum an MQTT v5 client is held to (0:
	// none, MQTT 3.1.1); inflight counts its unacknowledged QoS 1/2 publishes.
	receiveMax int32
	inflight   atomic.Int32

	// subscribed is set once the connection subscribes (or inherits a
	// subscription) and never cleared: deliveries may still be queued in
	// mochi after an unsubscribe.
	subscribed atomic.Bool
	// injecting: a QoS 2 publish of this connection is being delivered
	// locally under its client id (hook.endInjection ends it once).
	injecting atomic.Bool
	// qos2Floor: an accepted QoS 2 publish of this connection holds the
	// reverse path's progress until mochi has delivered it
	// (hook.publishQoS2).
	qos2Floor atomic.Pointer[session.Coord]

	// pub is what its publishes share (its read goroutine's).
	pub pubCache

	mu       sync.Mutex
	queue    []*pending
	draining bool

	// The drainer's own, reused between batches.
	ready []*pending
	buf   bytes.Buffer
}

// pending is one QoS 1/2 publish waiting for its acknowledgement.
type pending struct {
	id      uint16
	qos     byte
	topic   string
	local   localMsg      // QoS 1: what its local delivery needs of the packet
	deliver bool          // QoS 1: delivered here once acknowledged (decided with Kafka's acknowledgement)
	floor   bool          // QoS 1: holds session.ReverseProgress until delivered locally (LocalAcked)
	coord   session.Coord // where Kafka appended it (set before done on success)
	slot    bool          // holds a slot of ackQueue.slots
	turn    chan error    // QoS 2: receives the outcome when its turn has come
	done    bool
	err     error
}

// localMsg is what a QoS 1 publish's local delivery needs of its packet
// (mochi's, gone once OnPublish returns; its topic is pending.topic). It
// is kept for every publish, a few words: whether anyone here receives it
// is decided when Kafka has acknowledged it (hook.publishQoS1).
type localMsg struct {
	fh              packets.FixedHeader
	mods            packets.Mods
	payload         []byte
	created, expiry int64
	props           *packets.Properties // an MQTT 5 publisher's; nil for 3.1.1
}

// keepLocal keeps of cl's publish pk what its local delivery needs.
func keepLocal(cl *mqtt.Client, pk *packets.Packet) localMsg {
	m := localMsg{fh: pk.FixedHeader, mods: pk.Mods, payload: pk.Payload, created: pk.Created, expiry: pk.Expiry}
	if cl.Properties.ProtocolVersion == 5 && forwardsProps(&pk.Properties) {
		props := pk.Properties
		m.props = &props
	}
	return m
}

// forwardsProps reports whether a PUBLISH carries properties its
// subscribers get [MQTT-3.3.2.3]: all but the Topic Alias (resolved on the
// publisher's connection) and the Subscription Identifier (the server's,
// per subscriber).
func forwardsProps(p *packets.Properties) bool {
	return p.PayloadFormatFlag || p.MessageExpiryInterval > 0 || p.ContentType != "" || p.ResponseTopic != "" ||
		len(p.CorrelationData) > 0 || len(p.User) > 0
}

// packet is the publish to deliver locally.
func (p *pending) packet() packets.Packet {
	pk := packets.Packet{FixedHeader: p.local.fh, Mods: p.local.mods, TopicName: p.topic, Payload: p.local.payload,
		Created: p.local.created, Expiry: p.local.expiry}
	if p.local.props != nil {
		pk.Properties = *p.local.props
	}
	return pk
}

func newAckQueue(h *hook, cl *mqtt.Client) *ackQueue {
	q := &ackQueue{h: h, cl: cl, slots: make(chan struct{}, h.cfg.MQTT.MaxInflight)}
	if cl.Properties.ProtocolVersion == 5 {
		q.receiveMax = int32(h.cfg.MQTT.MaxInflight)
	}
	return q
}

// admit counts a QoS 1/2 publish against the Receive Maximum; false: the
// client sent one more than it may. It runs on the client's read goroutine.
func (q *ackQueue) admit() bool {
	if q.receiveMax == 0 {
		return true
	}
	if q.inflight.Load() >= q.receiveMax {
		return false
	}
	q.inflight.Add(1)
	return true
}

// qos2Done ends the count of an accepted QoS 2 publish (mochi has answered
// its PUBREL). Never below zero: a PUBREL may complete a publish of an
// earlier connection of the same session.
func (q *ackQueue) qos2Done() {
	if q.receiveMax == 0 {
		return
	}
	for n := q.inflight.Load(); n > 0; n = q.inflight.Load() {
		if q.inflight.CompareAndSwap(n, n-1) {
			return
		}
	}
}

// add appends a publish to the queue. It runs on the client's read
// goroutine, so entries are in PUBLISH order.
func (q *ackQueue) add(pk *packets.Packet) *pending {
	p := &pending{}
	q.enqueue(p, pk)
	return p
}

// enqueue is add for a pending the caller allocated (a QoS 1 publish's is
// part of its record: fwdRecord); p's other fields are set before.
func (q *ackQueue) enqueue(p *pending, pk *packets.Packet) {
	p.id, p.qos, p.topic = pk.PacketID, pk.FixedHeader.Qos, pk.TopicName
	q.mu.Lock()
	q.queue = append(q.queue, p)
	q.mu.Unlock()
}

// refuse queues a refusal known at once; it leaves after the
// acknowledgements of every earlier publish.
func (q *ackQueue) refuse(pk *packets.Packet, err error) {
	q.complete(q.add(pk), err)
}

// complete settles p. The first completion that makes the head of the queue
// ready starts a drainer.
func (q *ackQueue) complete(p *pending, err error) {
	q.mu.Lock()
	if p.done {
		q.mu.Unlock()
		return
	}
	p.done, p.err = true, err
	start := !q.draining && len(q.queue) > 0 && q.queue[0].done
	if start {
		q.draining = true
	}
	q.mu.Unlock()
	if start {
		// A goroutine of its own: a slow client socket must not hold up the
		// Kafka sender that completed the record.
		go q.drain()
	}
}

func (q *ackQueue) drain() {
	for {
		q.mu.Lock()
		n := 0
		for n < len(q.queue) && q.queue[n].done {
			n++
		}
		if n == 0 {
			q.draining = false
			q.mu.Unlock()
			return
		}
		q.ready = append(q.ready[:0], q.queue[:n]...)
		clear(q.queue[:n])
		q.queue = q.queue[n:]
		// Read under the lock: a SUBSCRIBE before the last of these
		// PUBLISHes is visible here.
		viaMochi := q.subscribed.Load()
		q.mu.Unlock()
		q.write(q.ready, viaMochi)
		clear(q.ready)
	}
}

// write delivers the accepted QoS 1 publishes of a batch locally, then
// writes the batch's acknowledgements in order.
//
// The batch's counts against the Receive Maximum end before any of its
// bytes are written: MQTT 5 frees the slot when the PUBACK is sent
// [MQTT-3.3.4-9], and a client may send its next publish the instant it
// reads one. Ended after the write, that publish could meet the stale
// count on the read goroutine and be refused with 0x93. (A QoS 2 publish's
// client waits for its turn on the read goroutine, so ending its count
// early admits nothing sooner.) The MQTT 3.1.1 slots, back pressure only,
// free after the write.
func (q *ackQueue) write(batch []*pending, viaMochi bool) {
	for _, p := range batch {
		q.uncount(p)
	}
	for _, p := range batch {
		if p.err == nil && p.deliver {
			if p.floor {
				q.h.ensureRead(p.coord.Topic, p.topic)
			}
			q.h.deliverLocal(q.cl, p.packet(), p.coord)
		}
		if p.floor {
			q.h.progress.LocalDelivered(p.coord)
		}
	}
	w := ackWriter{q: q, viaMochi: viaMochi}
	for _, p := range batch {
		switch {
		case p.err != nil:
			w.nack(p)
		case p.turn == nil:
			w.ack(p)
		}
		if p.turn != nil {
			// QoS 2: its client's read goroutine waits for this, so nothing
			// is queued after it. Accepted, mochi writes the PUBREC (and
			// keeps the PUBREL/PUBCOMP state).
			w.end()
			p.turn <- p.err
		}
	}
	w.end()
	for _, p := range batch {
		if p.slot {
			<-q.slots
		}
	}
}

// uncount ends p's count against the Receive Maximum, except an accepted
// QoS 2 publish's, which counts until qos2Done.
func (q *ackQueue) uncount(p *pending) {
	if q.receiveMax > 0 && (p.qos == 1 || p.err != nil) {
		q.inflight.Add(-1)
	}
}

// ackWriter writes one batch of acknowledgements (see ackQueue).
type ackWriter struct {
	q        *ackQueue
	viaMochi bool
	corked   *mqttconn.Conn
}

func (w *ackWriter) ack(p *pending) {
	cl := w.q.cl
	pk := packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Puback},
		PacketID:        p.id,
		ReasonCode:      packets.CodeSuccess.Code,
		ProtocolVersion: cl.Properties.ProtocolVersion,
	}
	if w.viaMochi {
		w.writePacket(pk)
		return
	}
	if err := pk.PubackEncode(&w.q.buf); err != nil {
		w.q.h.log.Debug("encoding puback", "client", cl.ID, "err", err)
	}
}

// nack refuses p: a PUBACK/PUBREC with a reason code for MQTT v5, a
// disconnect for MQTT 3.1.1 (which has no negative acknowledgement) and for
// a record too large for Kafka (0x95 is a DISCONNECT reason).
func (w *ackWriter) nack(p *pending) {
	h, cl := w.q.h, w.q.cl
	code := reasonCode(p.err)
	h.metrics.nacks.WithLabelValues(nackReason(p.err)).Inc()
	if cl.Properties.ProtocolVersion == 5 && code != packets.ErrPacketTooLarge {
		typ := packets.Puback
		if p.qos == 2 {
			typ = packets.Pubrec
		}
		w.writePacket(packets.Packet{
			FixedHeader: packets.FixedHeader{Type: typ},
			PacketID:    p.id,
			ReasonCode:  code.Code,
			Properties:  packets.Properties{ReasonString: p.err.Error()},
		})
		return
	}
	w.end()
	h.logs.Warn(cl.ID, "disconnecting client: publish not accepted by Kafka", "client", cl.ID, "topic", p.topic, "err", p.err)
	if cl.Properties.ProtocolVersion == 5 {
		_ = h.server.DisconnectClient(cl, code)
		return
	}
	cl.Stop(p.err)
}

// writePacket writes through mochi's own path, after the PUBACKs encoded
// before it, with the socket corked until end.
func (w *ackWriter) writePacket(pk packets.Packet) {
	w.flushBuf()
	if w.corked == nil {
		if c, ok := w.q.cl.Net.Conn.(*mqttconn.Conn); ok {
			c.Cork()
			w.corked = c
		}
	}
	if err := w.q.cl.WritePacket(pk); err != nil {
		w.q.h.log.Debug("writing ack", "client", w.q.cl.ID, "err", err)
	}
}

// end puts everything of the batch so far on the wire.
func (w *ackWriter) end() {
	w.flushBuf()
	if w.corked != nil {
		w.corked.Uncork()
		w.corked = nil
	}
}

// flushBuf writes the encoded PUBACKs with one system call under the
// client's lock, which orders it with mochi's writes (mochi holds no bytes
// of its own for a connection that never subscribed).
func (w *ackWriter) flushBuf() {
	buf, cl := &w.q.buf, w.q.cl
	if buf.Len() == 0 {
		return
	}
	defer func() {
		if buf.Cap() > 64<<10 {
			*buf = bytes.Buffer{} // do not keep a burst's buffer per connection
		}
		buf.Reset()
	}()
	if cl.Closed() || cl.Net.Conn == nil {
		return
	}
	cl.Lock()
	_, err := cl.Net.Conn.Write(buf.Bytes())
	cl.Unlock()
	if err != nil {
		w.q.h.log.Debug("writing pubacks", "client", cl.ID, "err", err)
	}
}
