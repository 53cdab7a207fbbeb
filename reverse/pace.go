package reverse

import (
	"bytes"
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// pacer keeps the reverse path from outrunning its subscribers.
//
// mochi hands each subscriber's messages to a bounded queue
// (mqtt.client_writes_pending) and drops them when it is full; QoS 1/2
// messages also count against the client's in-flight store (mochi's
// MaximumInflight, 8192), beyond which they are dropped without any hook. A
// Kafka consumer can read far faster than a socket drains, so before a QoS>0
// delivery the reverse path waits while a connected subscriber of the topic
// has limit or more unacknowledged messages: Kafka is the buffer, not the
// subscriber queue. The wait for one subscriber is bounded by maxWait; a
// subscriber that exceeds it is marked slow and not waited for again until it
// has caught up, so one stuck client costs the others at most maxWait per
// episode (its overflow is then dropped by mochi and counted as
// ferry_mqtt_subscriber_drops_total). QoS 0 deliveries are best effort and
// not paced. Disconnected persistent sessions are never waited for: their
// messages queue in the session (and the store) up to mochi's in-flight cap;
// the reverse path counts what mochi refuses beyond it (Consumer.handle).
type pacer struct {
	mqtt.HookBase
	id      string // the hook's ID
	server  *mqtt.Server
	log     *slog.Logger
	limit   int
	maxWait time.Duration

	waiting atomic.Bool
	wake    chan struct{}
	slow    map[string]struct{} // reverse goroutine only
	waits   atomic.Int64        // times a delivery waited (for tests and logs)
}

func newPacer(server *mqtt.Server, log *slog.Logger, limit int, maxWait time.Duration) *pacer {
	return &pacer{id: "ferry-reverse-pacer", server: server, log: log, limit: max(limit, 1), maxWait: maxWait,
		wake: make(chan struct{}, 1), slow: make(map[string]struct{})}
}

func (p *pacer) ID() string { return p.id }

func (p *pacer) Provides(b byte) bool {
	return bytes.Contains([]byte{mqtt.OnQosComplete, mqtt.OnQosDropped, mqtt.OnDisconnect}, []byte{b})
}

func (p *pacer) OnQosComplete(*mqtt.Client, packets.Packet) { p.signal() }
func (p *pacer) OnQosDropped(*mqtt.Client, packets.Packet)  { p.signal() }
func (p *pacer) OnDisconnect(*mqtt.Client, error, bool)     { p.signal() }
func (p *pacer) signal() {
	if p.waiting.Load() {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// wait returns true once every connected subscriber of topic is below the
// limit (or marked slow), false when ctx ended first. The fast path is one
// atomic load. One delivery waits at most maxWait in all, however many of
// its subscribers are busy: those still busy then are marked slow. (Each
// subscriber had maxWait of its own, so N subscribers taking turns to hold
// their acknowledgements delayed every delivery of the topic, to everyone,
// by N times maxWait per episode.)
func (p *pacer) wait(ctx context.Context, topic string) bool {
	if atomic.LoadInt64(&p.server.Info.Inflight) < int64(p.limit) {
		if len(p.slow) > 0 {
			clear(p.slow)
		}
		return true
	}
	var timer *time.Timer // the delivery's maxWait, started at its first wait
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	subs := p.server.Topics.Subscribers(topic)
	for id := range subs.Subscriptions {
		p.waitClient(ctx, id, &timer)
	}
	for _, group := range subs.Shared {
		for id := range group {
			p.waitClient(ctx, id, &timer)
		}
	}
	return ctx.Err() == nil
}

func (p *pacer) waitClient(ctx context.Context, id string, timer **time.Timer) {
	cl, ok := p.server.Clients.Get(id)
	if !ok || cl.Net.Inline {
		return
	}
	busy := func() bool { return !cl.Closed() && cl.State.Inflight.Len() >= p.limit }
	if !busy() {
		delete(p.slow, id)
		return
	}
	if _, ok := p.slow[id]; ok {
		return
	}
	p.waits.Add(1)
	p.waiting.Store(true)
	defer p.waiting.Store(false)
	if *timer == nil {
		*timer = time.NewTimer(p.maxWait)
	}
	for busy() {
		select {
		case <-p.wake:
		case <-(*timer).C:
			p.markSlow(id, cl)
			// Fired: the others still busy are marked at once.
			*timer = time.NewTimer(0)
			return
		case <-ctx.Done():
			return
		}
	}
}

// markSlow stops waiting for a subscriber until it has caught up.
func (p *pacer) markSlow(id string, cl *mqtt.Client) {
	p.slow[id] = struct{}{}
	p.log.Warn("slow MQTT subscriber: no longer waiting for it; its overflow is dropped and counted",
		"client", id, "unacked", cl.State.Inflight.Len(), "waited", p.maxWait)
}

// drain waits, up to timeout, until no connected client has unacknowledged
// QoS>0 deliveries, so that offsets committed at shutdown cover only what
// subscribers have acknowledged.
func (p *pacer) drain(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	p.waiting.Store(true)
	defer p.waiting.Store(false)
	for {
		pending := false
		for _, cl := range p.server.Clients.GetAll() {
			if !cl.Net.Inline && !cl.Closed() && cl.State.Inflight.Len() > 0 {
				pending = true
				break
			}
		}
		left := time.Until(deadline)
		if !pending {
			return true
		}
		if left <= 0 {
			return false
		}
		t := time.NewTimer(min(left, 50*time.Millisecond))
		select {
		case <-p.wake:
		case <-t.C:
		}
		t.Stop()
	}
}
