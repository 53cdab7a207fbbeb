package bridge

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ferry-bridge/ferry/reverse"
	"github.com/ferry-bridge/ferry/session"
)

// The bridge's side of the reverse consumer (package reverse): its config,
// its series, and the Sink it delivers to.

// reverseConfig is what the reverse consumer takes of c.
func (c Config) reverseConfig(brokers []string) reverse.Config {
	return reverse.Config{Brokers: brokers, InstanceID: c.Instance.ID, Topics: c.Reverse.Topics,
		GroupID: c.Reverse.GroupID, StartOffset: c.Reverse.StartOffset, Refresh: c.Reverse.Refresh,
		SkipOwn: c.Reverse.SkipOwn, MaxPacketSize: c.MQTT.MaxPacketSize,
		ClientWritesPending: c.MQTT.ClientWritesPending, ShutdownTimeout: c.ShutdownTimeout, Hold: c.reverseHold,
		ReadUncommitted: c.Kafka.IsolationLevel == readUncommitted}
}

// reverseGroupID is the reverse consumer's group (reverse.Config.Group).
func reverseGroupID(cfg Config) string { return cfg.reverseConfig(nil).Group() }

// startReverse builds the reverse consumer (reverse.topics is set).
func (b *Bridge) startReverse(brokers []string) (err error) {
	b.reverse, err = b.newReverse(b.cfg.reverseConfig(brokers), b.metrics.reverseMetrics(), nil)
	return err
}

// newReverse builds a reverse consumer of cfg on the reverse path's sink
// (the reverse topics' group consumer, or reading on demand).
func (b *Bridge) newReverse(cfg reverse.Config, m reverse.Metrics, demanded func(string, bool)) (*reverse.Consumer, error) {
	sink, err := b.reverseSink()
	if err != nil {
		return nil, err
	}
	sec, err := kgoSecurityOpts(b.cfg.Kafka)
	if err != nil {
		return nil, err
	}
	return reverse.New(cfg, reverse.Deps{Log: b.log, Server: b.server, Topics: b.tm, Order: b.order,
		Sink: sink, Metrics: m, KafkaOpts: sec, Demanded: demanded})
}

// reverseSink is the Sink of a reverse consumer: the broker's inline
// client, the retained table and the session engine's progress.
func (b *Bridge) reverseSink() (*reverseSink, error) {
	inline, ok := b.server.Clients.Get(mqtt.InlineClientId)
	if !ok {
		return nil, errors.New("mqtt inline client is not enabled")
	}
	log := b.log.With("component", "reverse")
	return &reverseSink{server: b.server, inline: inline, metrics: b.metrics,
		logs:     newRateLimiter(log, 10*time.Second),
		retained: b.stateEngine.Retained(), inj: b.stateEngine.Injections(), progress: b.stateEngine.ReverseProgress()}, nil
}

// reverseSink publishes the reverse consumer's deliveries (reverse.Sink)
// to the embedded broker through mochi's inline client, after the
// retained table when the consumer says so, and hands its progress to the
// session engine.
//
// Deliveries mochi refuses because a subscriber has mochi's maximum of
// messages in flight (a long-offline session) are counted in
// ferry_mqtt_subscriber_drops_total and logged rate-limited.
type reverseSink struct {
	server  *mqtt.Server
	inline  *mqtt.Client
	metrics *metrics
	logs    *rateLimiter
	// retained, when set, records retained messages from Kafka in the
	// retained table before their offset can be committed.
	retained *session.Retained
	inj      *session.Injections      // positions of persistent subscribers
	progress *session.ReverseProgress // nil: no session engine
}

// reverseRetainedRetry is the pause between attempts to write a retained
// message from Kafka.
const reverseRetainedRetry = 100 * time.Millisecond

func (s *reverseSink) Deliver(ctx context.Context, d reverse.Delivery) error {
	if d.WriteRetained && !s.writeRetained(ctx, &d.Packet) {
		return reverse.ErrStopped
	}
	refused := atomic.LoadInt64(&s.server.Info.InflightDropped)
	if s.inj != nil {
		s.inj.Begin(s.inline.ID, session.Coord{Topic: d.Topic, Partition: d.Partition, Offset: d.Offset}, d.Packet.TopicName)
		defer s.inj.End(s.inline.ID)
	}
	if err := s.server.InjectPacket(s.inline, d.Packet); err != nil {
		return err
	}
	if n := atomic.LoadInt64(&s.server.Info.InflightDropped) - refused; n > 0 {
		// mochi refuses a QoS 1/2 delivery when the subscriber already has
		// MaximumInflight messages in flight (a long-offline session): the
		// hooks' OnPublishDropped counted it; say so.
		s.logs.Warn("inflight_full:"+d.Packet.TopicName, "MQTT subscriber has too many undelivered messages: delivery dropped and counted",
			"topic", d.Packet.TopicName, "max_inflight", s.server.Options.Capabilities.MaximumInflight, "metric", "ferry_mqtt_subscriber_drops_total")
	}
	return nil
}

func (s *reverseSink) Handled(topic string, partition int32, next int64) {
	if s.progress != nil {
		s.progress.Handled(topic, partition, next)
	}
}

// writeRetained records a retained message from Kafka in the retained
// table, retrying until it is written or ctx ends (false: shutdown; the
// record is not committed and comes again after a restart).
func (s *reverseSink) writeRetained(ctx context.Context, pk *packets.Packet) bool {
	if s.retained == nil {
		return true
	}
	for ctx.Err() == nil {
		res := make(chan error, 1)
		s.retained.Write(s.inline.ID, pk, func(err error) { res <- err })
		select {
		case err := <-res:
			if err == nil {
				return true
			}
		case <-ctx.Done():
			return false
		}
		select {
		case <-ctx.Done():
		case <-time.After(reverseRetainedRetry):
		}
	}
	return false
}
