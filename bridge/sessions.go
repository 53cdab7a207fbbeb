package bridge

import (
	"context"
	"fmt"
	"sync"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ferry-bridge/ferry/admin/backend"
	"github.com/ferry-bridge/ferry/instance"
	"github.com/ferry-bridge/ferry/reverse"
	"github.com/ferry-bridge/ferry/session"
)

// openState opens the session engine (package session): the sessions and
// retained tables in Kafka, read to their end before the listeners open
// (for a while: session.Engine.WaitLoaded), the Wills of dead instances'
// clients (liveness from the instance check's heartbeats) and the reverse
// path's horizon. b.order, the redelivery order hook, exists already: the
// engine's replays number what they put in flight with it.
func (b *Bridge) openState(ctx context.Context, brokers []string) error {
	sec, err := kgoSecurityOpts(b.cfg.Kafka)
	if err != nil {
		return err
	}
	rf := int16(b.cfg.Kafka.ReplicationFactor)
	if b.embedded != nil {
		rf = 1 // the embedded Kafka is one broker, in memory
	}
	cfg := session.Config{Brokers: brokers, InstanceID: b.cfg.Instance.ID, Started: b.instance.Started(),
		SessionsTopic: b.cfg.State.SessionsTopic, RetainedTopic: b.cfg.State.RetainedTopic,
		Partitions: int32(b.cfg.State.Partitions), ReplicationFactor: rf, WriteTimeout: b.cfg.Kafka.AckTimeout,
		ConnectTimeout: max(b.cfg.State.ConnectTimeout, b.cfg.Kafka.AckTimeout),
		InstanceLapse:  b.cfg.State.InstanceLapse, MaxQueued: b.cfg.State.MaxQueued, ReplaySlots: b.replaySlots,
		SessionOwner: b.cfg.MQTT.sessionOwner(), MaxSessions: b.cfg.MQTT.MaxSessions,
		MaxSessionsPerUser: b.cfg.MQTT.maxSessionsPerUser(),
		ReadUncommitted:    b.cfg.Kafka.IsolationLevel == readUncommitted}
	if len(b.cfg.Reverse.Topics) > 0 && b.cfg.Reverse.GroupID == "" {
		cfg.ReverseGroup = reverseGroupID(b.cfg)
	}
	d := session.Deps{Log: b.log, Registerer: b.reg, Server: b.server, Topics: b.tm, KafkaOpts: sec,
		MayRead: session.ReadCheck(b.canRead), MayWrite: session.WriteCheck(b.canWrite), Deliverer: deliverer{b},
		QueueDrops: b.metrics.drops.WithLabelValues("session_queue_full")}
	if len(b.cfg.Reverse.Topics) > 0 {
		d.IsReverse = reverse.TopicMatcher(b.cfg.Reverse.Topics)
	}
	d.OnDemand = b.cfg.Reverse.OnDemand
	b.stateEngine, err = session.Open(cfg, d)
	if err != nil {
		return err
	}
	b.fleet = backend.NewFleet(b.cfg.State.SessionsTopic, b.cfg.State.InstanceLapse)
	b.instance.SetBeats(func(id string, hb instance.Heartbeat, own bool) {
		b.fleet.Saw(id, hb)
		b.stateEngine.Beat(id, session.Heartbeat{Stopped: hb.Stopped, SessionsTopic: hb.Sessions}, own)
	})
	return b.stateEngine.WaitLoaded(ctx)
}

// closeState closes the session engine (after the broker: its last
// session writes go first).
func (b *Bridge) closeState() {
	if b.stateEngine != nil {
		b.stateEngine.Close()
	}
}

// addSessionHooks adds the hooks that keep MQTT sessions: the session
// engine's (state in Kafka, positions, replay) and reverse.InflightOrder
// (redelivery order), in that order.
func (b *Bridge) addSessionHooks() error {
	if err := b.server.AddHook(b.stateEngine.Hook(), nil); err != nil {
		return fmt.Errorf("session hook: %w", err)
	}
	if err := b.server.AddHook(b.order, nil); err != nil {
		return fmt.Errorf("inflight order hook: %w", err)
	}
	return nil
}

// deliverer is the bridge's side of the session engine's deliveries
// (session.Deliverer): the forward hook and the redelivery order.
type deliverer struct{ b *Bridge }

func (d deliverer) Subscribed(cl *mqtt.Client) { d.b.hook.markSubscribed(cl) }

func (d deliverer) PutInFlight(cl *mqtt.Client, pid uint16) { d.b.order.PutInFlight(cl, pid) }

func (d deliverer) TakenOutOfFlight(cl *mqtt.Client, pid uint16) { d.b.order.TakenOutOfFlight(cl, pid) }

func (d deliverer) PublishWill(client string, protocol byte, w mqtt.Will) {
	d.b.hook.publishWill(client, protocol, w)
}

// publishWill publishes a Will on behalf of a client of a dead instance
// the way mochi publishes one (sendLWT, then OnWillSent): to Kafka (best
// effort, the QoS 0 way), to the retained table if flagged, and to this
// broker's subscribers (and its retained index), with the client as the
// origin.
func (h *hook) publishWill(client string, protocol byte, w mqtt.Will) {
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Retain: w.Retain, Qos: w.Qos},
		TopicName:   w.TopicName,
		Payload:     w.Payload,
		Properties:  mqtt.WillProperties(w), // 3.1.3.2, all of them
		Origin:      client,
		Created:     time.Now().Unix(),
	}
	// The Will's own Message Expiry Interval, from now (none: never).
	h.server.SetMessageExpiry(&pk)
	if protocol == 0 {
		protocol = 4
	}
	lp := h.locals.get(h.server)
	defer h.locals.put(lp)
	lp.cl.ID = client
	lp.cl.Properties.ProtocolVersion = protocol
	lp.created, lp.expiry = pk.Created, pk.Expiry
	pk.ProtocolVersion = protocol
	h.OnWillSent(lp.cl, pk)
	out := pk
	out.PacketID = 1 // must be set for QoS > 0; subscribers get their own
	if err := h.server.InjectPacket(lp.cl, out); err != nil {
		h.log.Debug("local delivery of a Will", "client", client, "topic", pk.TopicName, "err", err)
	}
}

// joinDone returns a func to be called n times; done runs once, after the
// last call, with the first error.
func joinDone(n int, done func(error)) func(error) {
	var mu sync.Mutex
	var first error
	return func(err error) {
		mu.Lock()
		if err != nil && first == nil {
			first = err
		}
		n--
		last, out := n == 0, first
		mu.Unlock()
		if last {
			done(out)
		}
	}
}
