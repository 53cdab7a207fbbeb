package reverse

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/internal/ratelimit"
)

// Consumer is the Kafka -> MQTT path: a franz-go consumer in a group
// (default "ferry-" + instance.id) that hands every record, as an MQTT
// message, to its Sink (the bridge publishes it through mochi's inline
// client). The package doc states its contract.
//
// Mapping: topicmap.Reverse (header mqtt.topic, then reverse rules, then the
// default DecodeTopic). Delivery QoS is the rule's, lowered by an mqtt.qos
// header; without a rule's, the header's, else 1 (so that each subscriber's
// own subscription QoS decides): topicmap.Delivery.RecordQoS;
// retain is set when the rule or the mqtt.retain header says so. Only the
// first occurrence of each reserved header (mqtt.*, ferry.*) is read
// (topicmap.ParseStandard): a record carrying two cannot be misread. Other
// Kafka headers become MQTT v5 user properties.
//
// Delivery promise (see committer): a record's offset is committed only once
// every QoS 1/2 delivery it produced to a clean session is acknowledged; a
// persistent session's own position in Kafka (session/positions.go) records what it
// still needs. A crash redelivers, never skips.
//
// Loops: records whose ferry.origin header is this instance's id are skipped
// (reverse.skip_own, default on), and the forward hook never bridges the
// inline client's publishes, so nothing the reverse path publishes returns to
// Kafka.
//
// Records that cannot be delivered (no valid MQTT topic, excluded topic,
// larger than mqtt.max_packet_size) are skipped, counted in
// ferry_reverse_skipped_total{reason} and logged rate-limited; they are
// committed like the others, so one bad record never stalls a partition.
type Consumer struct {
	cfg     Config
	log     *slog.Logger
	metrics Metrics
	logs    *ratelimit.Limiter
	pace    *pacer
	order   *InflightOrder
	sink    Sink
	commits *committer
	client  *kgo.Client

	conv Converter // the reverse goroutine's

	// A demand consumer's topics (demand.go): the partitions it reads.
	wantMu   sync.Mutex
	reading  map[string][]int32
	demanded func(topic string, reading bool)
}

// reverseSlowWait bounds how long one delivery waits for one slow subscriber.
const reverseSlowWait = time.Second

// reverseDrainTimeout bounds the wait at shutdown, without a session store,
// for subscribers to acknowledge in-flight messages before the final commit.
const reverseDrainTimeout = 2 * time.Second

// New builds the consumer and its Kafka client, and adds its pacer hook to
// d.Server. Nothing is consumed until Run.
func New(cfg Config, d Deps) (*Consumer, error) {
	log := d.Log.With("component", "reverse")
	r := &Consumer{
		cfg: cfg, log: log, metrics: d.Metrics,
		conv:    Converter{Topics: d.Topics, MaxPacketSize: cfg.MaxPacketSize},
		logs:    ratelimit.New(log, 10*time.Second),
		order:   d.Order,
		sink:    d.Sink,
		reading: map[string][]int32{}, demanded: d.Demanded,
	}
	if r.demanded == nil {
		r.demanded = func(string, bool) {}
	}
	// kgo may call back (the start offsets, once it joined the group)
	// before NewClient has returned: those wait for the client.
	created := make(chan struct{})
	opts := r.kgoOpts(log, time.Now(), func() { <-created; _ = r.commits.flush() },
		func() *kgo.Client { <-created; return r.client })
	opts = append(opts, d.KafkaOpts...)
	limit := min(cfg.ClientWritesPending, int(d.Server.Options.Capabilities.MaximumInflight)) / 2
	r.pace = newPacer(d.Server, log, limit, reverseSlowWait)
	if cfg.Demand {
		r.pace.id = "ferry-demand-pacer"
	}
	if err := d.Server.AddHook(r.pace, nil); err != nil {
		return nil, fmt.Errorf("reverse pacer hook: %w", err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("reverse consumer: %w", err)
	}
	r.client = cl
	if !cfg.Demand {
		r.commits = newCommitter(r.client, d.Order, log)
	}
	close(created)
	return r, nil
}

// PacerWaits is how many times a delivery waited for a subscriber (tests
// and logs).
func (r *Consumer) PacerWaits() int64 { return r.pace.waits.Load() }

// Flushes is how many commit rounds were closed (tests).
func (r *Consumer) Flushes() int64 { return r.commits.flushes.Load() }

// MarkedOffsets are the offsets marked for the next commit (tests).
func (r *Consumer) MarkedOffsets() map[string]map[int32]kgo.EpochOffset {
	return r.client.MarkedOffsets()
}

// Run consumes until ctx ends, then commits what is safe: it waits
// (bounded) for clean sessions to acknowledge and commits only what they
// did.
func (r *Consumer) Run(ctx context.Context) error {
	if r.cfg.Hold != nil {
		select {
		case <-r.cfg.Hold:
		case <-ctx.Done():
			return nil
		}
	}
	if r.cfg.Demand {
		r.log.Info("reading on demand the topics live subscriptions draw from")
	} else {
		r.log.Info("reverse path consuming", "topics", r.cfg.Topics, "group", r.cfg.Group(),
			"start_offset", r.cfg.StartOffset)
	}
	cctx, stopCommitter := context.WithCancel(context.Background())
	committerDone := make(chan struct{})
	go func() {
		defer close(committerDone)
		if r.commits != nil {
			r.commits.run(cctx)
		}
	}()
	resubscribed := map[string]time.Time{}
	for ctx.Err() == nil {
		fs := r.client.PollFetches(ctx)
		if fs.IsClientClosed() {
			break
		}
		var recreated []string
		failed := false
		fs.EachError(func(topic string, p int32, err error) {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return
			}
			failed = true
			if errors.Is(err, kerr.UnknownTopicID) && time.Since(resubscribed[topic]) > reverseResubscribeEvery {
				recreated = append(recreated, topic)
			}
			r.logs.Warn("fetch:"+topic, "reverse fetch error", "topic", topic, "partition", p, "err", err)
		})
		if len(recreated) > 0 {
			r.resubscribe(recreated)
			for _, t := range recreated {
				resubscribed[t] = time.Now()
			}
		}
		fs.EachPartition(r.partition(ctx))
		if failed && fs.NumRecords() == 0 {
			// kgo answers a persistent error at once: do not spin on it.
			select {
			case <-ctx.Done():
			case <-time.After(reverseErrorBackoff):
			}
		}
	}
	stopCommitter()
	<-committerDone
	if r.commits == nil {
		return nil
	}
	return r.commit()
}

// partition delivers one partition's fetched records by offset, then hands
// the last one to the committer and updates the lag gauge.
func (r *Consumer) partition(ctx context.Context) func(kgo.FetchTopicPartition) {
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
		if r.commits != nil {
			r.commits.handled(last)
		}
		r.sink.Handled(p.Topic, p.Partition, last.Offset+1)
		lag := max(p.HighWatermark-last.Offset-1, 0)
		r.metrics.Lag.WithLabelValues(p.Topic, strconv.Itoa(int(p.Partition))).Set(float64(lag))
	}
}

// handle publishes or skips one record; false means it was neither (shutdown)
// and must not be committed.
func (r *Consumer) handle(ctx context.Context, rec *kgo.Record) bool {
	if rec.Attrs.IsControl() {
		// A transaction's marker: nothing to deliver, but handed out (a
		// partition that ends with one is at its end: session/reverse_progress.go).
		return true
	}
	r.metrics.Consumed.Inc()
	skipOwnOf := ""
	if r.cfg.SkipOwn {
		skipOwnOf = r.cfg.InstanceID
	}
	cv := r.conv.Convert(rec, skipOwnOf)
	switch cv.Skip {
	case "":
	case skipUnmappable:
		r.logs.Warn("unmappable:"+rec.Topic, "kafka record skipped: no MQTT topic", "topic", rec.Topic,
			"partition", rec.Partition, "offset", rec.Offset, "err", cv.Err)
	case skipTooLarge:
		r.logs.Warn("too_large:"+rec.Topic, "kafka record skipped: larger than mqtt.max_packet_size", "topic", rec.Topic,
			"partition", rec.Partition, "offset", rec.Offset, "size", cv.Size, "max", r.cfg.MaxPacketSize)
	}
	if cv.Skip != "" {
		r.metrics.Skipped.WithLabelValues(cv.Skip).Inc()
		return true
	}
	pk, std := cv.Packet, cv.Std
	if pk.FixedHeader.Qos > 0 {
		pk.PacketID = 1 // the inline client's id is not used for delivery
		if !r.pace.wait(ctx, pk.TopicName) {
			return false
		}
		r.order.enter(ctx, pk.TopicName)
		defer r.order.leave()
		if ctx.Err() != nil {
			return false
		}
	}
	// One writer per retained message: a record another Ferry instance's
	// forward path marked retained was written to the retained table by that
	// instance before its PUBACK (instances of one deployment share the
	// table); writing it again from here would replace its record with a copy
	// that lost the publisher's fields.
	fromPeer := std.Origin != "" && std.HasRetain && std.Retain
	err := r.sink.Deliver(ctx, Delivery{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset,
		Packet: pk, WriteRetained: pk.FixedHeader.Retain && !fromPeer})
	if errors.Is(err, ErrStopped) {
		return false
	}
	if err != nil {
		r.metrics.Skipped.WithLabelValues("publish_failed").Inc()
		r.logs.Warn("publish:"+pk.TopicName, "kafka record not published to MQTT", "topic", pk.TopicName, "err", err)
		return true
	}
	r.metrics.Published.Inc()
	return true
}

// reverseResubscribeEvery bounds how often one topic is purged and added
// back; reverseErrorBackoff is the pause after a poll that brought only
// errors.
const (
	reverseResubscribeEvery = 5 * time.Second
	reverseErrorBackoff     = 100 * time.Millisecond
)

// resubscribe handles topics that were deleted and re-created under the
// running bridge: kgo keeps the old topic ID and fails every fetch with
// UNKNOWN_TOPIC_ID until the topic is purged and added back (kgo's README).
// What the committer still holds for the old topic is dropped first (an old
// offset committed to the new topic would skip its records); Kafka deletes
// the group's commits of a deleted topic, so the new one is read from its
// first record (it is newer than the bridge's start). A /regex/ finds the
// topic again at its next metadata refresh; a named topic is added back.
func (r *Consumer) resubscribe(topics []string) {
	r.log.Warn("reverse topic deleted and re-created (or deleted): consuming it again from its first record",
		"topics", topics)
	if r.cfg.Demand {
		// Read again from the first record at the next Want (the topic
		// is new: all of it is newer than its subscriptions).
		r.wantMu.Lock()
		for _, t := range topics {
			delete(r.reading, t)
		}
		r.wantMu.Unlock()
		r.client.PurgeTopicsFromConsuming(topics...)
		return
	}
	r.commits.forget(topics)
	r.client.PurgeTopicsFromConsuming(topics...)
	if !anyRegexTopic(r.cfg.Topics) {
		// Direct consuming: every topic fetched is a configured name.
		r.client.AddConsumeTopics(topics...)
	}
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

// commit makes the final commit at shutdown: it waits (bounded) for clean
// sessions to acknowledge, then commits only what is safe: what is still
// unacknowledged is redelivered after the restart (persistent sessions
// resume from their positions).
func (r *Consumer) commit() error {
	deadline := time.Now().Add(reverseDrainTimeout)
	for {
		if err := r.commits.flush(); err != nil {
			return fmt.Errorf("reverse: final commit: %w", err)
		}
		if !r.commits.unsafe() {
			break
		}
		if time.Now().After(deadline) {
			r.log.Warn("shutdown: clean-session subscribers still have unacknowledged messages; their records are not committed and will be redelivered",
				"waited", reverseDrainTimeout)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(r.cfg.ShutdownTimeout/2, 5*time.Second))
	defer cancel()
	if err := r.client.CommitMarkedOffsets(ctx); err != nil {
		return fmt.Errorf("reverse: final commit: %w", err)
	}
	return nil
}

// Close leaves the consumer group and releases the client (after Run has
// returned).
func (r *Consumer) Close() error {
	r.client.Close()
	return nil
}
