package bridge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/topicmap"
)

// reverse is the Kafka -> MQTT path: a franz-go consumer in a group (default
// "ferry-" + instance.id) that publishes every record to
// the embedded broker through mochi's inline client.
//
// Mapping: topicmap.Reverse (header mqtt.topic, then reverse rules, then the
// default DecodeTopic). QoS is the higher of the rule's and the mqtt.qos
// header; retain is set when the rule or the mqtt.retain header says so.
// Kafka headers become MQTT v5 user properties (reserved mqtt.* / ferry.*
// headers excluded).
//
// Delivery promise: a record's offset is marked only after the broker has
// taken the publish (InjectPacket returned: the message is in every
// subscriber's queue or in-flight store, and in the retained store); marked
// offsets are committed in the background every reverseCommitInterval and at
// shutdown, after waiting (bounded) for subscribers to acknowledge what is in
// flight. A restart resumes from the commit: at least once, duplicates at most
// one commit interval after a crash, none after a graceful stop.
//
// Loops: records whose ferry.origin header is this instance's id are skipped
// (reverse.skip_own, default on), and the forward hook never bridges the
// inline client's publishes, so nothing the reverse path publishes returns to
// Kafka.
//
// Records that cannot be delivered (no valid MQTT topic, excluded topic,
// larger than mqtt.max_packet_size) are skipped, counted in
// ferry_reverse_skipped_total{reason} and logged rate-limited; they are
// marked like the others, so one bad record never stalls a partition.
type reverse struct {
	cfg     Config
	log     *slog.Logger
	server  *mqtt.Server
	tm      *topicmap.Map
	metrics *metrics
	logs    *rateLimiter
	pace    *pacer
	client  *kgo.Client
	inline  *mqtt.Client
	origin  []byte
	maxSize int
	hold    <-chan struct{}

	hdrs  []topicmap.Header // scratch, reverse goroutine only
	props []topicmap.UserProperty
}

// reverseSlowWait bounds how long one delivery waits for one slow subscriber.
const reverseSlowWait = time.Second

// reverseDrainTimeout bounds the wait at shutdown for subscribers to
// acknowledge in-flight messages before the final commit.
const reverseDrainTimeout = 2 * time.Second

func newReverse(cfg Config, log *slog.Logger, server *mqtt.Server, tm *topicmap.Map, m *metrics, brokers []string) (*reverse, error) {
	inline, ok := server.Clients.Get(mqtt.InlineClientId)
	if !ok {
		return nil, errors.New("mqtt inline client is not enabled")
	}
	log = log.With("component", "reverse")
	opts, err := reverseKgoOpts(cfg, brokers, log, m)
	if err != nil {
		return nil, err
	}
	limit := min(cfg.MQTT.ClientWritesPending, int(server.Options.Capabilities.MaximumInflight)) / 2
	pace := newPacer(server, log, limit, reverseSlowWait)
	if err := server.AddHook(pace, nil); err != nil {
		return nil, fmt.Errorf("reverse pacer hook: %w", err)
	}
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("reverse consumer: %w", err)
	}
	return &reverse{
		cfg: cfg, log: log, server: server, tm: tm, metrics: m,
		logs:    newRateLimiter(log, 10*time.Second),
		pace:    pace,
		client:  client,
		inline:  inline,
		origin:  []byte(cfg.Instance.ID),
		maxSize: cfg.MQTT.MaxPacketSize,
		hold:    cfg.reverseHold,
	}, nil
}

// run consumes until ctx ends, then waits (bounded) for subscribers to
// acknowledge what is in flight and commits the published offsets.
func (r *reverse) run(ctx context.Context) error {
	if r.hold != nil {
		select {
		case <-r.hold:
		case <-ctx.Done():
			return nil
		}
	}
	r.log.Info("reverse path consuming", "topics", r.cfg.Reverse.Topics, "group", reverseGroupID(r.cfg),
		"start_offset", r.cfg.Reverse.StartOffset)
	for ctx.Err() == nil {
		fs := r.client.PollFetches(ctx)
		if fs.IsClientClosed() {
			break
		}
		fs.EachError(func(topic string, p int32, err error) {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return
			}
			r.logs.Warn("fetch:"+topic, "reverse fetch error", "topic", topic, "partition", p, "err", err)
		})
		fs.EachPartition(r.partition(ctx))
	}
	return r.commit()
}

// partition publishes one partition's fetched records in order, then marks
// the last one for commit and updates the lag gauge.
func (r *reverse) partition(ctx context.Context) func(kgo.FetchTopicPartition) {
	return func(p kgo.FetchTopicPartition) {
		var last *kgo.Record
		for _, rec := range p.Records {
			// At shutdown the rest of the fetch is left for the next run:
			// pacing stops with ctx, and unpaced publishes could overflow
			// subscriber queues after their offsets were committed.
			if ctx.Err() != nil || !r.handle(ctx, rec) {
				break
			}
			last = rec
		}
		if last == nil {
			return
		}
		r.client.MarkCommitRecords(last)
		lag := max(p.HighWatermark-last.Offset-1, 0)
		r.metrics.reverseLag.WithLabelValues(p.Topic, strconv.Itoa(int(p.Partition))).Set(float64(lag))
	}
}

// handle publishes or skips one record; false means it was neither (shutdown)
// and must not be marked.
func (r *reverse) handle(ctx context.Context, rec *kgo.Record) bool {
	r.metrics.reverseConsumed.Inc()
	r.hdrs = r.hdrs[:0]
	var qos byte
	var retain bool
	for _, h := range rec.Headers {
		switch h.Key {
		case topicmap.HeaderOrigin:
			if r.cfg.Reverse.SkipOwn && bytes.Equal(h.Value, r.origin) {
				r.metrics.reverseSkipped.WithLabelValues("own_origin").Inc()
				return true
			}
		case topicmap.HeaderQoS:
			if q, err := strconv.ParseUint(string(h.Value), 10, 8); err == nil && q <= 2 {
				qos = max(qos, byte(q))
			}
		case topicmap.HeaderRetain:
			if b, err := strconv.ParseBool(string(h.Value)); err == nil {
				retain = retain || b
			}
		}
		r.hdrs = append(r.hdrs, topicmap.Header{Key: h.Key, Value: h.Value})
	}
	d, err := r.tm.Reverse(rec.Topic, r.hdrs)
	if errors.Is(err, topicmap.ErrExcluded) {
		r.metrics.reverseSkipped.WithLabelValues("excluded").Inc()
		return true
	}
	if err != nil {
		r.metrics.reverseSkipped.WithLabelValues("unmappable").Inc()
		r.logs.Warn("unmappable:"+rec.Topic, "kafka record skipped: no MQTT topic", "topic", rec.Topic,
			"partition", rec.Partition, "offset", rec.Offset, "err", err)
		return true
	}
	r.props, _ = topicmap.HeadersToUserProps(r.props[:0], r.hdrs)
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: max(d.QoS, qos), Retain: d.Retain || retain},
		TopicName:   d.Topic,
		Payload:     rec.Value,
	}
	if len(r.props) > 0 {
		pk.Properties.User = make([]packets.UserProperty, len(r.props))
		for i, p := range r.props {
			pk.Properties.User[i] = packets.UserProperty{Key: p.Key, Val: p.Value}
		}
	}
	if size := publishSize(&pk); size > r.maxSize {
		r.metrics.reverseSkipped.WithLabelValues("too_large").Inc()
		r.logs.Warn("too_large:"+rec.Topic, "kafka record skipped: larger than mqtt.max_packet_size", "topic", rec.Topic,
			"partition", rec.Partition, "offset", rec.Offset, "size", size, "max", r.maxSize)
		return true
	}
	if pk.FixedHeader.Qos > 0 {
		pk.PacketID = 1 // the inline client's id is not used for delivery
		if !r.pace.wait(ctx, pk.TopicName) {
			return false
		}
	}
	if err := r.server.InjectPacket(r.inline, pk); err != nil {
		r.metrics.reverseSkipped.WithLabelValues("publish_failed").Inc()
		r.logs.Warn("publish:"+d.Topic, "kafka record not published to MQTT", "topic", d.Topic, "err", err)
		return true
	}
	r.metrics.reversePublished.Inc()
	return true
}

// publishSize is an upper bound of the encoded size of pk for an MQTT v5
// subscriber: fixed header, topic, packet id, properties and payload.
func publishSize(pk *packets.Packet) int {
	n := 2 + len(pk.TopicName) + 2 + len(pk.Payload) + 16 // properties length, expiry, alias, sub ids
	for _, u := range pk.Properties.User {
		n += 1 + 2 + len(u.Key) + 2 + len(u.Val)
	}
	return n + 5 // fixed header: type byte + up to 4 length bytes
}

// commit waits for in-flight deliveries to be acknowledged, then commits the
// marked offsets.
func (r *reverse) commit() error {
	if !r.pace.drain(reverseDrainTimeout) {
		r.log.Warn("shutdown: subscribers still have unacknowledged messages; committing anyway", "waited", reverseDrainTimeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(r.cfg.ShutdownTimeout/2, 5*time.Second))
	defer cancel()
	if err := r.client.CommitMarkedOffsets(ctx); err != nil {
		return fmt.Errorf("reverse: final commit: %w", err)
	}
	return nil
}

// close leaves the consumer group and releases the client.
func (r *reverse) close() error {
	r.client.Close()
	return nil
}
