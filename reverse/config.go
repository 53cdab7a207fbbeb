package reverse

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/topicmap"
)

// Config is what the consumer takes of the bridge's configuration (the
// reverse.* keys and the few others it depends on). The bridge validates
// it; see ValidTopic.
type Config struct {
	// Brokers is the Kafka bootstrap list.
	Brokers []string
	// InstanceID is instance.id: the client id "ferry-" + InstanceID, the
	// default group, and the ferry.origin of the records skipped as this
	// instance's own.
	InstanceID string
	// Topics is reverse.topics: Kafka topic names or /regex/ patterns.
	Topics []string
	// GroupID is reverse.group_id ("": "ferry-" + InstanceID; see Group).
	GroupID string
	// StartOffset is reverse.start_offset: latest or earliest.
	StartOffset string
	// Refresh is reverse.refresh, the metadata refresh (<= 0: DefaultRefresh).
	Refresh time.Duration
	// SkipOwn is reverse.skip_own: skip records whose ferry.origin is
	// InstanceID.
	SkipOwn bool
	// MaxPacketSize is mqtt.max_packet_size: larger records are skipped.
	MaxPacketSize int
	// ClientWritesPending is mqtt.client_writes_pending: with mochi's
	// MaximumInflight it sets the pacing limit (half the smaller).
	ClientWritesPending int
	// ReadUncommitted is kafka.isolation_level read_uncommitted: the
	// records of open and aborted transactions are delivered too. By
	// default (read_committed) only committed records are.
	ReadUncommitted bool
	// ShutdownTimeout is shutdown_timeout: half of it (at most 5s) bounds
	// the final commit.
	ShutdownTimeout time.Duration
	// Demand makes a demand consumer (demand.go): no group, no commits,
	// Topics and GroupID unused; it reads what Want says.
	Demand bool
	// Hold, when set (tests only), makes Run wait for the channel to close
	// before it consumes anything.
	Hold <-chan struct{}
}

// DefaultRefresh is the default of reverse.refresh.
const DefaultRefresh = 3 * time.Second

// Group is the consumer group: reverse.group_id, else "ferry-" +
// instance.id, stable across restarts of one instance.
func (c Config) Group() string {
	if c.GroupID != "" {
		return c.GroupID
	}
	return "ferry-" + c.InstanceID
}

// ValidTopic accepts a reverse.topics entry: a Kafka topic name or a
// /regex/.
func ValidTopic(t string) error {
	if isRegexTopic(t) {
		_, err := regexp.Compile(t[1 : len(t)-1])
		return err
	}
	if topicmap.IsFerryTopic(t) {
		return fmt.Errorf("%q is one of Ferry's own state topics (prefix %q): never published to MQTT", t, topicmap.FerryPrefix)
	}
	return topicmap.ValidKafkaTopic(t)
}

// Metrics are the consumer's series; the bridge creates and registers
// them (names ferry_reverse_*).
type Metrics struct {
	// Consumed counts records consumed (ferry_reverse_records_consumed_total).
	Consumed prometheus.Counter
	// Published counts records the Sink delivered (ferry_reverse_published_total).
	Published prometheus.Counter
	// Skipped counts records not delivered, by reason (one of SkipReasons;
	// ferry_reverse_skipped_total).
	Skipped *prometheus.CounterVec
	// Lag is the lag in records, labelled topic and partition
	// (ferry_reverse_consumer_lag).
	Lag *prometheus.GaugeVec
}

// SkipReasons are the reason label values of Metrics.Skipped.
var SkipReasons = []string{skipOwn, skipExcluded, skipUnmappable, skipTooLarge, "publish_failed"}

// Delivery is one record as an MQTT message, for the Sink.
type Delivery struct {
	// Topic, Partition and Offset are the Kafka record's coordinate.
	Topic     string
	Partition int32
	Offset    int64
	// Packet is the PUBLISH: the MQTT topic, QoS, retain, payload and user
	// properties (a QoS>0 packet carries packet id 1: subscribers get their
	// own).
	Packet packets.Packet
	// WriteRetained: the message is retained and this instance is its
	// writer in the retained table (not when another Ferry instance's
	// forward path marked the record retained: it wrote the record already).
	WriteRetained bool
}

// ErrStopped is what a Sink's Deliver returns when ctx ended before the
// delivery could be made (the retained write was not done): the record is
// not committed and comes again after a restart.
var ErrStopped = errors.New("reverse: stopped before delivery")

// Sink is where the consumer delivers: the bridge's side (the broker's
// inline client, the retained table, the session engine).
type Sink interface {
	// Deliver publishes d to the broker's subscribers, after writing it to
	// the retained table when d.WriteRetained (retried until written or ctx
	// ends: then ErrStopped). Another error means d was not published: it
	// is counted as skipped (publish_failed), logged, and committed like
	// the others. The consumer calls it from one goroutine, each
	// partition's records by offset, and for QoS>0 inside the redelivery
	// order's gate (after pacing).
	Deliver(ctx context.Context, d Delivery) error
	// Handled tells that every record of the partition before next is
	// handled (delivered or skipped): the session engine's reverse
	// progress.
	Handled(topic string, partition int32, next int64)
}

// Deps are what the consumer needs from the bridge besides its config.
type Deps struct {
	Log *slog.Logger
	// Server is the embedded broker: the pacer (a hook New adds) reads
	// its subscribers' in-flight counts. The consumer does not publish to
	// it; the Sink does.
	Server *mqtt.Server
	// Topics maps records to MQTT topics (topicmap.Reverse).
	Topics *topicmap.Map
	// Order is the redelivery order hook the bridge added to Server: the
	// commit rule reads what is in flight to clean sessions from it, and
	// QoS>0 deliveries go through its gate.
	Order *InflightOrder
	// Sink receives the deliveries.
	Sink Sink
	// Metrics are the consumer's series.
	Metrics Metrics
	// KafkaOpts are options the consumer's Kafka client gets besides its
	// own (TLS, SASL).
	KafkaOpts []kgo.Opt
	// Demanded, if not nil, hears that a demand consumer started (true,
	// after the Sink's Handled of each partition's start) or stopped
	// reading a topic.
	Demanded func(topic string, reading bool)
}
