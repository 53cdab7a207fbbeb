package share

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/topicmap"
)

// Config is what the share groups take of the bridge's configuration.
type Config struct {
	// Brokers is the Kafka bootstrap list.
	Brokers []string
	// InstanceID names this instance's Kafka clients.
	InstanceID string
	// SessionTimeout is the consumer groups' session timeout
	// (share.session_timeout): an instance that dies is dropped from its
	// groups after it, and its partitions go to the others.
	SessionTimeout time.Duration
	// MaxInflight bounds the unacknowledged deliveries of one group to one
	// member (share.max_inflight).
	MaxInflight int
	// MaxPacketSize is mqtt.max_packet_size: larger records are skipped.
	MaxPacketSize int
	// ReadUncommitted is kafka.isolation_level read_uncommitted.
	ReadUncommitted bool
	// Every is how often the live shared subscriptions are matched
	// against the cluster's topics (<= 0: DefaultEvery).
	Every time.Duration
}

// Defaults of Config.
const (
	DefaultSessionTimeout = 10 * time.Second
	DefaultMaxInflight    = 32
	DefaultEvery          = 500 * time.Millisecond
)

// Bounds of Config: the session timeout within Kafka's default
// group.min.session.timeout.ms and group.max.session.timeout.ms.
const (
	MinSessionTimeout = 6 * time.Second
	MaxSessionTimeout = 30 * time.Minute
	MaxMaxInflight    = 65535
)

// Validate reports a Config that cannot work.
func (c Config) Validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("share: no Kafka brokers"))
	}
	if c.SessionTimeout < MinSessionTimeout || c.SessionTimeout > MaxSessionTimeout {
		errs = append(errs, fmt.Errorf("share.session_timeout %s: must be within Kafka's group.min.session.timeout.ms and group.max.session.timeout.ms (6s to 30m by default)", c.SessionTimeout))
	}
	if c.MaxInflight < 1 || c.MaxInflight > MaxMaxInflight {
		errs = append(errs, fmt.Errorf("share.max_inflight %d: must be 1 to %d", c.MaxInflight, MaxMaxInflight))
	}
	return errors.Join(errs...)
}

// GroupName is the Kafka consumer group of the shared subscription
// $share/{name}/{filter}: the same on every instance, distinct per filter.
func GroupName(name, filter string) string {
	sum := sha256.Sum256([]byte(filter))
	return "ferry-share-" + name + "-" + hex.EncodeToString(sum[:6])
}

// splitShared splits a shared subscription's filter $share/{name}/{filter};
// false: it is not one.
func splitShared(f string) (name, filter string, ok bool) {
	rest, ok := strings.CutPrefix(f, "$share/")
	if !ok {
		return "", "", false
	}
	name, filter, ok = strings.Cut(rest, "/")
	return name, filter, ok && name != "" && filter != ""
}

// Metrics are the share groups' series, labelled group (the shared
// subscription, $share/{name}/{filter}); the bridge creates and registers
// them.
type Metrics struct {
	// Members are this instance's live members (ferry_share_members).
	Members *prometheus.GaugeVec
	// Partitions are the partitions Kafka assigned this instance
	// (ferry_share_partitions).
	Partitions *prometheus.GaugeVec
	// Lag is the records of those partitions not yet handed out
	// (ferry_share_lag).
	Lag *prometheus.GaugeVec
	// Delivered counts deliveries to members (ferry_share_delivered_total).
	Delivered *prometheus.CounterVec
	// Redelivered counts deliveries of a message a member that went had
	// not acknowledged (ferry_share_redelivered_total).
	Redelivered *prometheus.CounterVec
}

// Deps are what the share groups need from the bridge besides Config.
type Deps struct {
	Log *slog.Logger
	// Server is the embedded broker: members are its clients; the Manager
	// is added to it as a hook.
	Server *mqtt.Server
	// Topics maps records to MQTT topics.
	Topics *topicmap.Map
	// Match returns the Kafka topics the filters can draw from, each with
	// the time to read it from (the filters' own times, or later).
	Match func(ctx context.Context, filters map[string]time.Time) (map[string]time.Time, error)
	// KafkaOpts are options each group's client gets besides its own
	// (TLS, SASL).
	KafkaOpts []kgo.Opt
	Metrics   Metrics
}

// NewMetrics creates the series (not registered: see Collectors).
func NewMetrics() Metrics {
	label := []string{"group"}
	return Metrics{
		Members: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ferry_share_members",
			Help: "Live members of each shared subscription ($share/{name}/{filter}) on this instance."}, label),
		Partitions: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ferry_share_partitions",
			Help: "Kafka partitions the shared subscription's consumer group assigned this instance."}, label),
		Lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ferry_share_lag",
			Help: "Records of this instance's partitions of the shared subscription not yet handed to a member."}, label),
		Delivered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ferry_share_delivered_total",
			Help: "Messages handed to a member of the shared subscription (redeliveries included)."}, label),
		Redelivered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ferry_share_redelivered_total",
			Help: "Messages handed to a member again because the member they were owed by went unacknowledged."}, label),
	}
}

// Collectors are the series to register.
func (m Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Members, m.Partitions, m.Lag, m.Delivered, m.Redelivered}
}
