// Package probe measures Ferry the way the reference test did, in one
// command and to the microsecond: it publishes and subscribes MQTT, produces
// and consumes Kafka, stamps every message (package stamp), joins what it
// sent with what it received and reports loss, duplicates, reordering,
// throughput and latency distributions (package stats) as a table, a CSV
// and an optional per-message raw file.
//
// Three directions are measured: MQTT -> Kafka (Kafka-append latency from
// the record's LogAppendTime, and end-to-end latency to the probe's own
// consumer), Kafka -> MQTT, and the MQTT -> Kafka -> MQTT round trip
// (optionally split at the record's LogAppendTime: SplitAtKafka).
package probe

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"

	"github.com/ferry-bridge/ferry/probe/link"
	"github.com/ferry-bridge/ferry/probe/stamp"
)

// Direction names a measured path.
type Direction string

// The directions the probe measures; the names are the CLI subcommands and
// the CSV "direction" column.
const (
	MQTTToKafka Direction = "mqtt-to-kafka"
	KafkaToMQTT Direction = "kafka-to-mqtt"
	Roundtrip   Direction = "roundtrip"
)

// Metric names used in results and in the CSV "metric" column.
const (
	// MetricAppend is Kafka LogAppendTime minus the send time.
	MetricAppend = "append"
	// MetricE2E is the receive time minus the send time.
	MetricE2E = "e2e"
	// MetricDelivery (roundtrip with SplitAtKafka) is the MQTT receive
	// time minus the Kafka record's LogAppendTime: from the append to the
	// delivery to the subscriber. Its start has whole-ms resolution.
	MetricDelivery = "delivery"
	// MetricKafka (kafka-to-mqtt) is the probe's own Kafka consumer's
	// receive time minus the produce time: the floor under the bridge.
	MetricKafka = "kafka"
	// MetricBridge (kafka-to-mqtt) is, per message, the MQTT receive time
	// minus the probe's Kafka receive time of the same record: the
	// bridge's own share of the path.
	MetricBridge = "bridge"
	// MetricAck (mqtt-to-kafka --ack-only) is the acknowledgement time
	// minus the send time.
	MetricAck = "ack"
)

// Publisher clients (Config.Client).
const (
	ClientRaw  = "raw"
	ClientPaho = "paho"
)

// defaultOpenInflight is the window of an open-loop run without --inflight.
const defaultOpenInflight = 16384

// Errors returned by Run. Failures are wrapped with the details (which
// broker, which topic, how many messages).
var (
	// ErrConfig means the Config is invalid.
	ErrConfig = errors.New("probe: invalid config")
	// ErrMQTTUnreachable means an MQTT connection or subscription failed.
	ErrMQTTUnreachable = errors.New("mqtt unreachable")
	// ErrKafkaUnreachable means the Kafka cluster could not be reached.
	ErrKafkaUnreachable = errors.New("kafka unreachable")
	// ErrTopicMissing means the Kafka topic to produce to does not exist.
	ErrTopicMissing = errors.New("kafka topic missing")
	// ErrLost means a QoS >= 1 run lost messages (results are still
	// returned).
	ErrLost = errors.New("messages lost")
	// ErrPartialConnect means some subscribers could not connect or
	// subscribe; the others were measured (results are still returned).
	ErrPartialConnect = errors.New("subscribers failed to connect")
	// ErrLink means the emulated link could not be set up (not root, no
	// /dev/net/tun).
	ErrLink = errors.New("link emulation failed")
	// ErrSend means publishes or produces failed.
	ErrSend = errors.New("send failed")
)

// Config is one probe run. Zero fields take the defaults of DefaultConfig.
type Config struct {
	// MQTT is the broker URL publishers and subscribers connect to.
	// Default: tcp://127.0.0.1:1883.
	MQTT string
	// ReplyMQTT is the broker URL the roundtrip subscribers connect to.
	// Default: MQTT.
	ReplyMQTT string
	// Username and Password authenticate MQTT clients. Default: none.
	Username, Password string
	// Kafka is the bootstrap broker list. Default: 127.0.0.1:9092.
	Kafka []string
	// Topic is the MQTT topic. Default: /tacos/pub/lf for mqtt-to-kafka and
	// roundtrip, /tacos/sub/le for kafka-to-mqtt.
	Topic string
	// KafkaTopic is the Kafka topic. Default: the bridge's default mapping
	// of Topic (every '/' becomes '_'). Roundtrip uses it only with
	// SplitAtKafka.
	KafkaTopic string
	// SplitAtKafka (roundtrip) also consumes KafkaTopic, the topic the
	// bridge writes the published messages to, joins each record to its
	// message by the stamp and splits the round trip at the record's
	// LogAppendTime: metrics append (publish -> Kafka append, whole ms) and
	// delivery (Kafka append -> MQTT delivery). The CLI sets it when --kafka
	// is given. Default: false (roundtrip consumes nothing from Kafka).
	SplitAtKafka bool
	// ReplyTopic is the MQTT topic roundtrip subscribers listen on.
	// Default: Topic (which then needs ReplyMQTT to be another bridge
	// instance, or Local).
	ReplyTopic string
	// Local (roundtrip) lets the subscribers listen on Topic on the
	// publishers' own broker: the trip is that broker's own delivery (on
	// Ferry, one instance; on any MQTT broker, its fan-out). Default:
	// false (refused, as it would not time a trip through Kafka).
	Local bool
	// Count is the number of measured messages. Default: 10000.
	Count int
	// Warmup is the number of messages sent first and excluded from the
	// figures. Default: 0.
	Warmup int
	// QoS is the MQTT QoS of publishes and subscriptions (0, 1, 2).
	// Default: 0 in the zero Config; the CLI defaults to 1.
	QoS int
	// PayloadSize is the payload length in bytes, at least 12 (the stamp).
	// Default: 12, or 12 + the file's length with PayloadFile.
	PayloadSize int
	// PayloadFile, if set, fills the payload after the stamp with the
	// file's content, repeated or truncated to PayloadSize.
	PayloadFile string
	// Rate is the total send rate in messages per second: open loop,
	// latency measured from the intended send time (coordinated-omission
	// correction). 0 means closed loop: each client waits for the previous
	// send to complete (PUBACK / Kafka ack) before the next.
	Rate float64
	// Clients is the number of MQTT publishers or Kafka producer
	// goroutines. Default: 1.
	Clients int
	// Client is the MQTT publisher implementation: "raw" (the probe's own
	// engine: pre-encoded packets, buffered writes, a window of Inflight
	// publishes per connection, acknowledgements timed as they arrive) or
	// "paho" (eclipse/paho.mqtt.golang). Default: raw.
	Client string
	// Inflight is the number of QoS 1/2 publishes each client keeps in
	// flight. 1 is the reference test's closed loop (publish, wait for the
	// PUBACK, publish). Default: 1 without Rate; 16384 with Rate (open
	// loop: the schedule, not the acknowledgements, paces the sends).
	Inflight int
	// Topics spreads mqtt-to-kafka publishes over this many MQTT topics,
	// Topic/0 ... Topic/N-1 (each publisher round-robin), mapped to as
	// many Kafka topics. Default: 1 (Topic itself).
	Topics int
	// AckOnly (mqtt-to-kafka) measures publish -> acknowledgement only,
	// with no Kafka consumer: for an MQTT broker without Kafka behind it
	// (Mosquitto alone, the MQTT ceiling). The metric is "ack"; at QoS 0,
	// which has no acknowledgement, a PINGREQ after every 256 publishes
	// stands in: its PINGRESP means the broker processed them. Needs the
	// raw client. Default: false.
	AckOnly bool
	// Subscribers is the number of MQTT subscribers (kafka-to-mqtt and
	// roundtrip); each must receive every message. Default: 1.
	Subscribers int
	// Ramp is the rate at which subscribers connect, per second; 0
	// connects them all at once. Default: 0.
	Ramp float64
	// Link, if set, puts the probe's MQTT clients behind an emulated link
	// (package link): "satellite", "wifi", "lan" or
	// "custom:delay=270ms,jitter=10ms,loss=0.5%,rate=2mbit". Needs root and
	// /dev/net/tun. Default: none.
	Link string
	// Timeout is how long to wait for stragglers after the last send.
	// Default: 10s.
	Timeout time.Duration
	// ConnectTimeout bounds connecting to MQTT and Kafka. Default: 5s.
	ConnectTimeout time.Duration
	// NoCreateTopic stops kafka-to-mqtt from creating a missing Kafka
	// topic; by default it creates it (1 partition, replication 1,
	// message.timestamp.type=LogAppendTime, as the bridge creates topics)
	// and says so. Default: false.
	NoCreateTopic bool
	// Raw keeps one line per message for WriteRaw. Default: false.
	Raw bool
}

// DefaultConfig returns the defaults for direction d.
func DefaultConfig(d Direction) Config {
	topic := "/tacos/pub/lf"
	if d == KafkaToMQTT {
		topic = "/tacos/sub/le"
	}
	return Config{
		MQTT:           "tcp://127.0.0.1:1883",
		Kafka:          []string{"127.0.0.1:9092"},
		Topic:          topic,
		Count:          10000,
		QoS:            1,
		PayloadSize:    stamp.Size,
		Clients:        1,
		Client:         ClientRaw,
		Topics:         1,
		Subscribers:    1,
		Timeout:        10 * time.Second,
		ConnectTimeout: 5 * time.Second,
	}
}

// withDefaults fills zero fields; it never mutates the caller's Config.
func (c Config) withDefaults(d Direction) Config {
	def := DefaultConfig(d)
	if c.MQTT == "" {
		c.MQTT = def.MQTT
	}
	if c.ReplyMQTT == "" {
		c.ReplyMQTT = c.MQTT
	}
	if len(c.Kafka) == 0 {
		c.Kafka = def.Kafka
	}
	if c.Topic == "" {
		c.Topic = def.Topic
	}
	if c.ReplyTopic == "" {
		c.ReplyTopic = c.Topic
	}
	if c.Count == 0 {
		c.Count = def.Count
	}
	if c.Clients == 0 {
		c.Clients = def.Clients
	}
	if c.Client == "" {
		c.Client = def.Client
	}
	if c.Topics == 0 {
		c.Topics = def.Topics
	}
	if c.Inflight == 0 {
		c.Inflight = 1
		if c.Rate > 0 {
			c.Inflight = defaultOpenInflight
		}
	}
	if c.Subscribers == 0 {
		c.Subscribers = def.Subscribers
	}
	if c.Timeout == 0 {
		c.Timeout = def.Timeout
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = def.ConnectTimeout
	}
	return c
}

// Validate checks c for direction d (after defaults) and names the bad
// field and value.
func (c Config) Validate(d Direction) error {
	c = c.withDefaults(d)
	bad := func(field string, v any, why string) error {
		return fmt.Errorf("%w: %s=%v: %s", ErrConfig, field, v, why)
	}
	switch d {
	case MQTTToKafka, KafkaToMQTT, Roundtrip:
	default:
		return bad("direction", d, "want mqtt-to-kafka, kafka-to-mqtt or roundtrip")
	}
	switch {
	case c.Count < 1:
		return bad("count", c.Count, "must be at least 1")
	case c.Warmup < 0:
		return bad("warmup", c.Warmup, "must not be negative")
	case int64(c.Count)+int64(c.Warmup) > math.MaxUint32:
		return bad("count", c.Count, "count + warmup must fit in 32 bits")
	case c.QoS < 0 || c.QoS > 2:
		return bad("qos", c.QoS, "must be 0, 1 or 2")
	case c.PayloadSize != 0 && c.PayloadSize < stamp.Size:
		return bad("payload-size", c.PayloadSize, fmt.Sprintf("must be at least %d (the stamp)", stamp.Size))
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return bad("rate", c.Rate, "must be a positive number, or 0 for closed loop")
	case c.Clients < 1:
		return bad("clients", c.Clients, "must be at least 1")
	case c.Client != ClientRaw && c.Client != ClientPaho:
		return bad("client", c.Client, "want raw or paho")
	case c.Inflight < 1 || c.Inflight > 65535:
		return bad("inflight", c.Inflight, "must be 1..65535 (MQTT packet ids)")
	case c.Topics < 1 || c.Topics > 10000:
		return bad("topics", c.Topics, "must be 1..10000")
	case c.Topics > 1 && d != MQTTToKafka:
		return bad("topics", c.Topics, "several topics are measured for mqtt-to-kafka only")
	case c.SplitAtKafka && d != Roundtrip:
		return bad("split-at-kafka", c.SplitAtKafka, "only roundtrip is split at the Kafka append")
	case d == Roundtrip && c.KafkaTopic != "" && !c.SplitAtKafka:
		return bad("kafka-topic", c.KafkaTopic, "roundtrip consumes Kafka only with --kafka (the per-hop split)")
	case c.AckOnly && d != MQTTToKafka:
		return bad("ack-only", c.AckOnly, "only mqtt-to-kafka has acknowledgements to measure")
	case c.AckOnly && c.Client != ClientRaw:
		return bad("ack-only", c.AckOnly, "needs --client raw")
	case c.Subscribers < 1:
		return bad("subscribers", c.Subscribers, "must be at least 1")
	case c.Ramp < 0 || math.IsNaN(c.Ramp) || math.IsInf(c.Ramp, 0):
		return bad("ramp", c.Ramp, "must be a positive number of connections per second, or 0 for all at once")
	case c.Timeout < 0:
		return bad("timeout", c.Timeout, "must not be negative")
	case c.ConnectTimeout < 0:
		return bad("connect-timeout", c.ConnectTimeout, "must not be negative")
	}
	if c.Link != "" {
		if _, err := link.Parse(c.Link); err != nil {
			return bad("link", c.Link, err.Error())
		}
	}
	if d == Roundtrip && c.ReplyMQTT == c.MQTT && c.ReplyTopic == c.Topic && !c.Local {
		return bad("reply-topic", c.ReplyTopic, "equals --topic on the same broker: the subscriber would get the "+
			"broker's local delivery, not the Kafka round trip; give --reply-mqtt (a second bridge instance) "+
			"or a --reply-topic the bridge routes back from Kafka (or --local to time that broker's own delivery)")
	}
	if d == MQTTToKafka && c.Subscribers > 1 {
		return bad("subscribers", c.Subscribers, "mqtt-to-kafka has one Kafka consumer")
	}
	return nil
}

// Env carries what a run needs from its caller besides the Config.
type Env struct {
	// Logger receives diagnostics. Default: discard.
	Logger *slog.Logger
	// Progress, if non-nil, receives a live progress line (carriage
	// returns) about twice a second. Pass it only when it is a terminal.
	Progress io.Writer
}

func (e Env) logger() *slog.Logger {
	if e.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.Logger
}
