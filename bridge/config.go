package bridge

import (
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"strings"
	"time"

	"github.com/ferry-bridge/ferry/producer"
	"github.com/ferry-bridge/ferry/reverse"
	"github.com/ferry-bridge/ferry/share"
	"github.com/ferry-bridge/ferry/topicmap"
)

// Config is the whole bridge configuration. Defaults come from DefaultConfig;
// Validate reports every problem with the key that holds it and its value.
// YAML keys (and FERRY_* environment variables, dots become underscores) are
// the mapstructure tags below.
type Config struct {
	Instance InstanceConfig  `mapstructure:"instance" yaml:"instance"`
	MQTT     MQTTConfig      `mapstructure:"mqtt" yaml:"mqtt"`
	Kafka    KafkaConfig     `mapstructure:"kafka" yaml:"kafka"`
	Ring     RingConfig      `mapstructure:"ring" yaml:"ring"`
	Topics   topicmap.Config `mapstructure:"topics" yaml:"topics"`
	Reverse  ReverseConfig   `mapstructure:"reverse" yaml:"reverse"`
	Share    ShareConfig     `mapstructure:"share" yaml:"share"`
	Storage  StorageConfig   `mapstructure:"storage" yaml:"storage"`
	State    StateConfig     `mapstructure:"state" yaml:"state"`
	HTTP     HTTPConfig      `mapstructure:"http" yaml:"http"`
	Log      LogConfig       `mapstructure:"log" yaml:"log"`
	Runtime  RuntimeConfig   `mapstructure:"runtime" yaml:"runtime"`
	// ShutdownTimeout bounds the graceful shutdown (drain ring, flush Kafka,
	// commit offsets). Default: 10s.
	ShutdownTimeout time.Duration `mapstructure:"shutdown_timeout" yaml:"shutdown_timeout"`

	// reverseHold, when set (tests only), makes the reverse path wait for the
	// channel to close before it publishes anything.
	reverseHold <-chan struct{}
	// maxInflightOut, when set (tests only), replaces mochi's
	// MaximumInflight: how many QoS 1/2 deliveries one client may have
	// unacknowledged before mochi refuses more (default 8,192).
	maxInflightOut uint16
}

// RuntimeConfig tunes the Go runtime of the bridge process; cmd/bridge
// applies it (it is process-wide, so the bridge package never does).
type RuntimeConfig struct {
	// GCPercent is the garbage collector's heap growth target (what GOGC
	// sets; Go's default is 100). The forward path allocates per message
	// and a quarter of the bridge's CPU went to the collector at 100:
	// 400 gave 1.29x the QoS 1 throughput for ~25 MiB more peak RSS
	// (docs/benchmarks.md). The GOGC environment variable, when set,
	// wins. Set GOMEMLIMIT in containers so that a large heap collects
	// before the memory limit. Default: 400. Range 25..10000.
	GCPercent int `mapstructure:"gc_percent" yaml:"gc_percent"`
	// ReleaseIdleMemory returns to the system the heap a burst left behind
	// once the process is quiet (internal/idlegc): with GCPercent 400 an
	// idle instance kept 3 KiB of RSS per offline session made in a burst,
	// 20 s after, where its live heap was 0.3 KiB. Default: true.
	ReleaseIdleMemory bool `mapstructure:"release_idle_memory" yaml:"release_idle_memory"`
}

// InstanceConfig identifies this bridge instance.
type InstanceConfig struct {
	// ID is written into every record's origin header and names the default
	// reverse consumer group. Default: the hostname.
	ID string `mapstructure:"id" yaml:"id"`
}

// MQTTConfig configures the embedded broker.
type MQTTConfig struct {
	// Listen is the TCP listener address. Default: 127.0.0.1:1883.
	Listen string `mapstructure:"listen" yaml:"listen"`
	// WSListen is an optional WebSocket listener address. Default: "" (off).
	WSListen string `mapstructure:"ws_listen" yaml:"ws_listen"`
	// TLSListen is an optional TLS listener address; needs TLS.Cert and TLS.Key.
	TLSListen string    `mapstructure:"tls_listen" yaml:"tls_listen"`
	TLS       TLSConfig `mapstructure:"tls" yaml:"tls"`
	// AllowAnonymous lets clients connect without credentials. Required
	// (explicitly true) when a listener binds a non-loopback address and no
	// users are configured. Default: false; a loopback-only bridge with no
	// users accepts anonymous clients anyway.
	AllowAnonymous bool `mapstructure:"allow_anonymous" yaml:"allow_anonymous"`
	// Users are the accepted credentials and their ACLs.
	Users []User `mapstructure:"users" yaml:"users"`
	// Anonymous is the ACL of clients that connect without a username (when
	// anonymous access is on; with no users configured that is every
	// client). Default: empty (no restriction).
	Anonymous ACL `mapstructure:"anonymous" yaml:"anonymous"`
	// MaxKeepalive caps the keep alive a client may ask for (whole seconds):
	// a longer one, or 0, is replaced by it (v5 clients are told in CONNACK's
	// Server Keep Alive). Default: 0 (no limit).
	MaxKeepalive time.Duration `mapstructure:"max_keepalive" yaml:"max_keepalive"`
	// MaxSessionExpiry is the longest a session outlives its connection
	// (whole seconds): an MQTT 3.1.1 persistent session (clean session 0)
	// is kept this long, an MQTT 5 client asking for a longer Session
	// Expiry Interval gets this (and is told in CONNACK). An expired
	// session's record is deleted by its owner, or, when its owner is dead
	// or gone, by a surviving instance (docs/sessions.md). Default: 2h.
	// 0: no limit (sessions of 3.1.1 clients are then never ended).
	MaxSessionExpiry time.Duration `mapstructure:"max_session_expiry" yaml:"max_session_expiry"`
	// MaxMessageExpiry caps the Message Expiry Interval an MQTT 5 publisher
	// asks (whole seconds): a message asking for longer expires after this,
	// and its deliveries say what is left of it. A message that asks none
	// never expires, whatever this says (MQTT 5 3.3.2.3.3; MQTT 3.1.1 has no
	// expiry). Default: 0 (no cap).
	MaxMessageExpiry time.Duration `mapstructure:"max_message_expiry" yaml:"max_message_expiry"`
	// MaxPacketSize is the largest MQTT packet accepted, in bytes. Default: 1 MiB.
	MaxPacketSize int `mapstructure:"max_packet_size" yaml:"max_packet_size"`
	// MaxTopicLevels and MaxTopicLength bound a topic name or filter (its
	// levels; its bytes): a SUBSCRIBE filter beyond them gets 0x8F Topic
	// Filter invalid (3.1.1: 0x80), a QoS 1/2 PUBLISH 0x90 Topic Name
	// invalid (3.1.1: the connection is closed; QoS 0: dropped), before any
	// work on the broker's topic index (an unbounded filter of 65,535
	// levels cost seconds of CPU). Default: 64 and 4096. Range 1..65535.
	MaxTopicLevels int `mapstructure:"max_topic_levels" yaml:"max_topic_levels"`
	MaxTopicLength int `mapstructure:"max_topic_length" yaml:"max_topic_length"`
	// MaxInflight bounds the QoS 1/2 publishes of one client that wait for
	// Kafka at once (pipelining depth). Default: 1024.
	MaxInflight int `mapstructure:"max_inflight" yaml:"max_inflight"`
	// ClientWritesPending is mochi's per-client outbound queue length; lower it
	// for very many connections. Default: 1024.
	ClientWritesPending int `mapstructure:"client_writes_pending" yaml:"client_writes_pending"`
	// WriteTimeout bounds one write to a client's socket: a subscriber that
	// stops reading is disconnected after this long instead of blocking the
	// publishers to its topics (internal/mqttconn). Default: 10s.
	WriteTimeout time.Duration `mapstructure:"write_timeout" yaml:"write_timeout"`
	// ObscureNotAuthorized makes MQTT 5 refusals for lack of authorization
	// (a denied SUBSCRIBE filter or PUBLISH) say 0x80 Unspecified error
	// instead of 0x87 Not authorized, which some clients and test suites
	// expect (mochi's Compatibilities.ObscureNotAuthorized). Default: false.
	ObscureNotAuthorized bool `mapstructure:"obscure_not_authorized" yaml:"obscure_not_authorized"`
	// SessionOwner binds a session to the user who made it: a CONNECT of
	// another user with its client id (while the session lives, connected
	// or not) is refused Not authorized (MQTT 5 0x87, 3.1.1 return code
	// 5) and the session is left as it is. "auto": on when users are
	// configured, off without (every client is anonymous then); "on";
	// "off" (any user may resume or take over any session by its client
	// id, under its own ACL). Default: auto.
	SessionOwner string `mapstructure:"session_owner" yaml:"session_owner"`
	// MaxSessions caps the persistent sessions in the sessions table (all
	// instances): a CONNECT that would make one more is refused Quota
	// exceeded (MQTT 5 0x97, 3.1.1 Server unavailable). Default: 1000000.
	// 0: no cap.
	MaxSessions int `mapstructure:"max_sessions" yaml:"max_sessions"`
	// MaxSessionsPerUser caps the persistent sessions of one username the
	// same way, when users are configured (clients without a username
	// count as one user). Default: 10000. 0: no cap.
	MaxSessionsPerUser int `mapstructure:"max_sessions_per_user" yaml:"max_sessions_per_user"`
}

// sessionOwner reports whether sessions are bound to their user
// (mqtt.session_owner, auto resolved).
func (c MQTTConfig) sessionOwner() bool {
	switch c.SessionOwner {
	case "on":
		return true
	case "off":
		return false
	}
	return len(c.Users) > 0
}

// maxSessionsPerUser is mqtt.max_sessions_per_user where it applies: with
// users configured (without, every client is anonymous, one user).
func (c MQTTConfig) maxSessionsPerUser() int {
	if len(c.Users) == 0 {
		return 0
	}
	return c.MaxSessionsPerUser
}

// User is one MQTT credential with its topic ACL.
type User struct {
	Username string `mapstructure:"username" yaml:"username"`
	// Password is plain text, or a bcrypt hash ("$2a$...", "$2b$...", "$2y$...").
	Password string `mapstructure:"password" yaml:"password"`
	// ACL: the user's allow and deny lists (publish, subscribe,
	// deny_publish, deny_subscribe in the user's entry).
	ACL `mapstructure:",squash" yaml:",inline"`
}

// ACL is a topic access list. Publish and Subscribe list the topic filters
// a client may use (empty: all); DenyPublish and DenySubscribe list filters
// it may not use, and a deny match wins over an allow match.
type ACL struct {
	Publish       []string `mapstructure:"publish" yaml:"publish"`
	Subscribe     []string `mapstructure:"subscribe" yaml:"subscribe"`
	DenyPublish   []string `mapstructure:"deny_publish" yaml:"deny_publish"`
	DenySubscribe []string `mapstructure:"deny_subscribe" yaml:"deny_subscribe"`
}

func (a ACL) empty() bool {
	return len(a.Publish)+len(a.Subscribe)+len(a.DenyPublish)+len(a.DenySubscribe) == 0
}

// TLSConfig holds certificate files.
type TLSConfig struct {
	Cert string `mapstructure:"cert" yaml:"cert"`
	Key  string `mapstructure:"key" yaml:"key"`
	// CA verifies the peer: client certificates on the MQTT side (required
	// when set), the brokers' certificates on the Kafka side.
	CA string `mapstructure:"ca" yaml:"ca"`
	// Enabled turns TLS on for Kafka (with the system roots when CA is empty).
	Enabled bool `mapstructure:"enabled" yaml:"enabled"`
}

// SASLConfig configures Kafka SASL authentication.
type SASLConfig struct {
	// Mechanism: "" (off), PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
	Mechanism string `mapstructure:"mechanism" yaml:"mechanism"`
	Username  string `mapstructure:"username" yaml:"username"`
	Password  string `mapstructure:"password" yaml:"password"`
}

// KafkaConfig configures the Kafka side.
type KafkaConfig struct {
	// Brokers is the bootstrap list. Empty: an embedded in-memory Kafka is
	// started (for trying Ferry out, never for production).
	Brokers []string `mapstructure:"brokers" yaml:"brokers"`
	// EmbeddedPort is the port of the embedded Kafka on 127.0.0.1 (only
	// without Brokers), so that tools find it (kcat -b 127.0.0.1:9092). If
	// it is in use, a free port is taken and logged. 0: any free port.
	// Default: 9092.
	EmbeddedPort int `mapstructure:"embedded_port" yaml:"embedded_port"`
	// Acks: all or one. "none" is refused: a PUBACK would mean nothing.
	// "one" starts with a warning: the leader alone has the record when the
	// PUBACK leaves. Default: all.
	Acks string `mapstructure:"acks" yaml:"acks"`
	// AckTimeout bounds how long a QoS 1/2 publish waits for Kafka before the
	// client gets a negative acknowledgement. Default: 5s.
	AckTimeout time.Duration `mapstructure:"ack_timeout" yaml:"ack_timeout"`
	// Linger delays a partial batch to let it fill. Default: 0 (a batch leaves
	// as soon as the ring is empty).
	Linger time.Duration `mapstructure:"linger" yaml:"linger"`
	// MaxBatch is the most records of one partition in one produce request;
	// the producer holds at most 16 x MaxBatch records. Default: 1000.
	MaxBatch int `mapstructure:"max_batch" yaml:"max_batch"`
	// MaxBatchBytes bounds one partition's batch (a larger record goes
	// alone); a request carries at most 4 x MaxBatchBytes. Default: 1 MiB.
	MaxBatchBytes int `mapstructure:"max_batch_bytes" yaml:"max_batch_bytes"`
	// Compression: none, gzip, snappy, lz4, zstd. Default: lz4, which
	// costs Kafka and the bridge less CPU per record than none (fewer
	// bytes to copy, checksum and write; docs/benchmarks.md).
	Compression string `mapstructure:"compression" yaml:"compression"`
	// IsolationLevel is what the reverse path and the session replays
	// read of transactional topics: read_committed (only committed
	// records; an aborted transaction's are never delivered to MQTT) or
	// read_uncommitted (every record, aborted ones too). Default:
	// read_committed.
	IsolationLevel string `mapstructure:"isolation_level" yaml:"isolation_level"`
	// Partitions and ReplicationFactor apply to topics Ferry creates (its
	// data topics, the state topics, _ferry_instances). ReplicationFactor
	// -1 leaves it to the cluster: each broker's default.replication.factor
	// (Kafka 2.4+); 1 keeps one copy, on one broker. Defaults: 1 and -1.
	Partitions        int `mapstructure:"partitions" yaml:"partitions"`
	ReplicationFactor int `mapstructure:"replication_factor" yaml:"replication_factor"`
	// MaxCreatedTopics caps how many topics one instance creates (protection
	// against topic explosion). Default: 1000.
	MaxCreatedTopics int `mapstructure:"max_created_topics" yaml:"max_created_topics"`
	// Headers names the standard headers every forward record carries:
	// header names, "default" and "all" (the set of earlier releases, ferry.seq
	// included); docs/topic-mapping.md says what reads each. A set that
	// breaks a promise is refused (topicmap.Config.CheckHeaders). Default: [default].
	Headers []string   `mapstructure:"headers" yaml:"headers"`
	TLS     TLSConfig  `mapstructure:"tls" yaml:"tls"`
	SASL    SASLConfig `mapstructure:"sasl" yaml:"sasl"`
}

// producerConfig is what the producer takes of k.
func (k KafkaConfig) producerConfig() producer.Config {
	return producer.Config{Acks: k.Acks, AckTimeout: k.AckTimeout, Linger: k.Linger, MaxBatch: k.MaxBatch,
		MaxBatchBytes: k.MaxBatchBytes, Compression: k.Compression, Partitions: k.Partitions,
		ReplicationFactor: k.ReplicationFactor, MaxCreatedTopics: k.MaxCreatedTopics}
}

// RingConfig configures the buffer between MQTT and Kafka.
type RingConfig struct {
	// Capacity in messages, a power of two. Default: 65536.
	Capacity int `mapstructure:"capacity" yaml:"capacity"`
	// QoS0Policy when the ring is full: drop-newest, drop-oldest or block.
	// QoS 1/2 publishes always wait (up to kafka.ack_timeout). Default: drop-newest.
	QoS0Policy string `mapstructure:"qos0_policy" yaml:"qos0_policy"`
}

// ReverseConfig configures the Kafka -> MQTT path.
type ReverseConfig struct {
	// Topics are Kafka topic names or /regex/ patterns. Empty: no reverse path.
	Topics []string `mapstructure:"topics" yaml:"topics"`
	// GroupID is the consumer group. Default: "ferry-" + instance.id (each
	// instance serves its own subscribers); set a shared name to split records
	// between instances instead.
	GroupID string `mapstructure:"group_id" yaml:"group_id"`
	// StartOffset for partitions without a committed offset: latest (the
	// first record newer than the group's first start: a new group skips old
	// history, a partition that appears later is read from its first
	// record) or earliest.
	// Default: latest.
	StartOffset string `mapstructure:"start_offset" yaml:"start_offset"`
	// Refresh is how often Kafka metadata is re-read: new topics matching a
	// /regex/ and named topics that did not exist yet are found within it
	// (plus a group rebalance). Default: 3s.
	Refresh time.Duration `mapstructure:"refresh" yaml:"refresh"`
	// SkipOwn skips records this instance produced (loop prevention). Default: true.
	SkipOwn bool `mapstructure:"skip_own" yaml:"skip_own"`
	// OnDemand reads, besides Topics, the Kafka topics that the live
	// subscriptions of this instance's clients can draw from (names that
	// map back to a matching MQTT topic), while they can: a subscriber on
	// one instance receives what is published on another. Default: true.
	OnDemand bool `mapstructure:"on_demand" yaml:"on_demand"`
}

// ShareConfig is how shared subscriptions ($share/{name}/{filter}) are
// delivered: one Kafka consumer group each (package share).
type ShareConfig struct {
	// SessionTimeout is the groups' Kafka session timeout: the partitions
	// of an instance that died go to the others after it. Default: 10s.
	SessionTimeout time.Duration `mapstructure:"session_timeout" yaml:"session_timeout"`
	// MaxInflight bounds one member's unacknowledged deliveries of one
	// group. Default: 32.
	MaxInflight int `mapstructure:"max_inflight" yaml:"max_inflight"`
}

// StorageConfig is kept only to refuse storage.dir with a clear error:
// the local session store it configured (Pebble) is gone. Sessions, their
// queues (as positions in Kafka) and retained messages live in Kafka
// (state.*), so an instance keeps nothing on disk.
type StorageConfig struct {
	// Dir: must be empty.
	Dir string `mapstructure:"dir" yaml:"dir"`
}

// StateConfig names the compacted Kafka topics that hold the broker state
// every instance shares (package state): MQTT sessions with their
// subscriptions, and retained messages. Ferry creates them when missing
// (cleanup.policy=compact, LogAppendTime, hourly segments,
// kafka.replication_factor).
type StateConfig struct {
	// SessionsTopic holds one record per client id. Default: _ferry_sessions.
	SessionsTopic string `mapstructure:"sessions_topic" yaml:"sessions_topic"`
	// RetainedTopic holds one record per retained MQTT topic. Default: _ferry_retained.
	RetainedTopic string `mapstructure:"retained_topic" yaml:"retained_topic"`
	// Partitions of the topics when Ferry creates them. Default: 8.
	Partitions int `mapstructure:"partitions" yaml:"partitions"`
	// MaxQueued caps the QoS 1/2 messages a resuming session is given from
	// what matched while it was offline; the newer ones beyond the cap are
	// dropped and counted (ferry_dropped_total{reason="session_queue_full"}),
	// as Mosquitto's max_queued_messages does. 0: no cap, Kafka's retention
	// bounds the queue. Default: 0.
	MaxQueued int `mapstructure:"max_queued" yaml:"max_queued"`
	// HeartbeatInterval is how often the instance appends its heartbeat
	// to _ferry_instances. Default: 2s.
	HeartbeatInterval time.Duration `mapstructure:"heartbeat_interval" yaml:"heartbeat_interval"`
	// InstanceLapse: an instance whose heartbeat has not been read for this
	// long is dead, and a surviving instance publishes the Wills of the
	// clients it held (docs/sessions.md). Must exceed 2x HeartbeatInterval.
	// Default: 10s.
	InstanceLapse time.Duration `mapstructure:"instance_lapse" yaml:"instance_lapse"`
	// ConnectTimeout bounds a persistent session's CONNECT in Kafka (the
	// sessions table read to its end, the session's record read, its claim
	// written): past it the client gets CONNACK Server unavailable. Longer
	// than kafka.ack_timeout: in a reconnect storm Kafka is slow, not gone,
	// and a refused client comes back to cost the same work again. Never
	// shorter than kafka.ack_timeout (a longer one is taken). Default: 15s.
	ConnectTimeout time.Duration `mapstructure:"connect_timeout" yaml:"connect_timeout"`
}

// HTTPConfig configures /metrics, /healthz, /readyz and the admin API.
type HTTPConfig struct {
	// Listen address; "" disables the HTTP server. Default: 127.0.0.1:8080.
	Listen string `mapstructure:"listen" yaml:"listen"`
	// Pprof mounts /debug/pprof/. Default: false.
	Pprof bool `mapstructure:"pprof" yaml:"pprof"`

	// The operator's admin API under /api/v1/ (docs/operations.md).
	// AdminToken is its bearer token; "" (and no AdminTokenFile): the
	// API is off. Prefer the environment (FERRY_HTTP_ADMIN_TOKEN) or
	// AdminTokenFile. Default: "".
	AdminToken string `mapstructure:"admin_token" yaml:"admin_token"`
	// AdminTokenFile names a file holding the token (its surrounding
	// white space ignored), read at start. Default: "".
	AdminTokenFile string `mapstructure:"admin_token_file" yaml:"admin_token_file"`
	// AdminInsecure serves the admin API on a non-loopback listener
	// without TLS (behind a TLS-terminating proxy, say); without it such a
	// configuration is refused. Default: false.
	AdminInsecure bool `mapstructure:"admin_insecure" yaml:"admin_insecure"`
	// TLSCert and TLSKey, both set, serve the HTTP listener over TLS.
	// Default: "" (plain HTTP).
	TLSCert string `mapstructure:"tls_cert" yaml:"tls_cert"`
	TLSKey  string `mapstructure:"tls_key" yaml:"tls_key"`
}

// adminOn reports whether the admin API is configured.
func (c HTTPConfig) adminOn() bool { return c.AdminToken != "" || c.AdminTokenFile != "" }

// LogConfig configures the logger built by cmd/bridge.
type LogConfig struct {
	// Level: debug, info, warn, error. Default: info.
	Level string `mapstructure:"level" yaml:"level"`
	// Format: text or json. Default: text.
	Format string `mapstructure:"format" yaml:"format"`
}

// clusterReplicationFactor as kafka.replication_factor (the default) creates
// topics with the cluster's own replication factor: Kafka applies its
// brokers' default.replication.factor to a CreateTopics request whose
// replication factor is -1 (CreateTopics v4+, Kafka 2.4+).
const clusterReplicationFactor = producer.ClusterReplicationFactor

// DefaultConfig returns the configuration used where nothing else is given.
func DefaultConfig() Config {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "ferry"
	}
	return Config{
		Instance: InstanceConfig{ID: host},
		MQTT: MQTTConfig{
			Listen:              "127.0.0.1:1883",
			MaxPacketSize:       1 << 20,
			MaxTopicLevels:      64,
			MaxTopicLength:      4096,
			MaxInflight:         1024,
			ClientWritesPending: 1024,
			WriteTimeout:        10 * time.Second,
			MaxSessionExpiry:    2 * time.Hour,
			SessionOwner:        "auto",
			MaxSessions:         1000000,
			MaxSessionsPerUser:  10000,
		},
		Kafka: KafkaConfig{
			EmbeddedPort:      9092,
			Acks:              "all",
			AckTimeout:        5 * time.Second,
			MaxBatch:          1000,
			MaxBatchBytes:     1 << 20,
			Compression:       "lz4",
			IsolationLevel:    readCommitted,
			Partitions:        1,
			ReplicationFactor: clusterReplicationFactor,
			MaxCreatedTopics:  1000,
			Headers:           []string{topicmap.HeaderSetDefault},
		},
		Ring:    RingConfig{Capacity: 1 << 16, QoS0Policy: "drop-newest"},
		Topics:  topicmap.DefaultConfig(),
		Reverse: ReverseConfig{StartOffset: "latest", Refresh: reverse.DefaultRefresh, SkipOwn: true, OnDemand: true},
		Share:   ShareConfig{SessionTimeout: share.DefaultSessionTimeout, MaxInflight: share.DefaultMaxInflight},
		State: StateConfig{SessionsTopic: "_ferry_sessions", RetainedTopic: "_ferry_retained", Partitions: 8,
			HeartbeatInterval: instanceHeartbeat, InstanceLapse: 10 * time.Second, ConnectTimeout: 15 * time.Second},
		HTTP: HTTPConfig{Listen: "127.0.0.1:8080"},
		Log:  LogConfig{Level: "info", Format: "text"},

		Runtime:         RuntimeConfig{GCPercent: 400, ReleaseIdleMemory: true},
		ShutdownTimeout: 10 * time.Second,
	}
}

// maxSessionExpiry is mqtt.max_session_expiry in seconds, as the broker
// takes it (0, no limit: the largest interval MQTT can say).
func (c MQTTConfig) maxSessionExpiry() uint32 {
	if c.MaxSessionExpiry <= 0 {
		return math.MaxUint32
	}
	return uint32(c.MaxSessionExpiry / time.Second)
}

// The values of kafka.isolation_level.
const (
	readCommitted   = "read_committed"
	readUncommitted = "read_uncommitted"
)

// maxMessageExpiry is mqtt.max_message_expiry in seconds, as the broker
// takes it (0: no cap).
func (c MQTTConfig) maxMessageExpiry() int64 {
	return int64(c.MaxMessageExpiry / time.Second)
}

// FieldError names the configuration key and value that are wrong.
type FieldError struct {
	Key    string
	Value  any
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("config %s=%v: %s", e.Key, e.Value, e.Reason)
}

// Validate checks every field and their combinations. It returns all
// problems joined, each a *FieldError.
func (c Config) Validate() error {
	var errs []error
	bad := func(key string, value any, format string, args ...any) {
		errs = append(errs, &FieldError{Key: key, Value: value, Reason: fmt.Sprintf(format, args...)})
	}
	if c.Instance.ID == "" {
		bad("instance.id", `""`, "must not be empty")
	}
	if c.MQTT.Listen == "" && c.MQTT.WSListen == "" && c.MQTT.TLSListen == "" {
		bad("mqtt.listen", `""`, "at least one of mqtt.listen, mqtt.ws_listen, mqtt.tls_listen is needed")
	}
	for _, l := range []struct{ key, addr string }{{"mqtt.listen", c.MQTT.Listen}, {"mqtt.ws_listen", c.MQTT.WSListen}, {"mqtt.tls_listen", c.MQTT.TLSListen}, {"http.listen", c.HTTP.Listen}} {
		if l.addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(l.addr); err != nil {
			bad(l.key, l.addr, "not a host:port address: %v", err)
		}
	}
	if c.MQTT.TLSListen != "" && (c.MQTT.TLS.Cert == "" || c.MQTT.TLS.Key == "") {
		bad("mqtt.tls", c.MQTT.TLSListen, "mqtt.tls_listen needs mqtt.tls.cert and mqtt.tls.key")
	}
	if len(c.MQTT.Users) == 0 && !c.MQTT.AllowAnonymous {
		for _, l := range []struct{ key, addr string }{{"mqtt.listen", c.MQTT.Listen}, {"mqtt.ws_listen", c.MQTT.WSListen}, {"mqtt.tls_listen", c.MQTT.TLSListen}} {
			if l.addr != "" && !isLoopback(l.addr) {
				bad(l.key, l.addr, "non-loopback listener without authentication: configure mqtt.users or set mqtt.allow_anonymous: true explicitly")
			}
		}
	}
	for i, u := range c.MQTT.Users {
		if u.Username == "" {
			bad(fmt.Sprintf("mqtt.users[%d].username", i), `""`, "must not be empty")
		}
		u.ACL.validate(fmt.Sprintf("mqtt.users[%d]", i), bad)
	}
	c.MQTT.Anonymous.validate("mqtt.anonymous", bad)
	if c.MQTT.MaxKeepalive < 0 || c.MQTT.MaxKeepalive > 65535*time.Second || c.MQTT.MaxKeepalive%time.Second != 0 {
		bad("mqtt.max_keepalive", c.MQTT.MaxKeepalive, "must be whole seconds in 0s..65535s (0: no limit)")
	}
	switch c.MQTT.SessionOwner {
	case "auto", "on", "off":
	default:
		bad("mqtt.session_owner", c.MQTT.SessionOwner, "must be auto, on or off")
	}
	if c.MQTT.MaxSessions < 0 {
		bad("mqtt.max_sessions", c.MQTT.MaxSessions, "must be >= 0 (0: no cap)")
	}
	if c.MQTT.MaxSessionsPerUser < 0 {
		bad("mqtt.max_sessions_per_user", c.MQTT.MaxSessionsPerUser, "must be >= 0 (0: no cap)")
	}
	if c.MQTT.MaxSessionExpiry < 0 || c.MQTT.MaxSessionExpiry > math.MaxUint32*time.Second || c.MQTT.MaxSessionExpiry%time.Second != 0 {
		bad("mqtt.max_session_expiry", c.MQTT.MaxSessionExpiry, "must be whole seconds in 0s..%s (0: no limit)", math.MaxUint32*time.Second)
	}
	if c.MQTT.MaxMessageExpiry < 0 || c.MQTT.MaxMessageExpiry > math.MaxUint32*time.Second || c.MQTT.MaxMessageExpiry%time.Second != 0 {
		bad("mqtt.max_message_expiry", c.MQTT.MaxMessageExpiry, "must be whole seconds in 0s..%s (0: no cap)", math.MaxUint32*time.Second)
	}
	if c.MQTT.MaxPacketSize < 64 {
		bad("mqtt.max_packet_size", c.MQTT.MaxPacketSize, "must be at least 64")
	}
	if c.MQTT.MaxTopicLevels < 1 || c.MQTT.MaxTopicLevels > 65535 {
		bad("mqtt.max_topic_levels", c.MQTT.MaxTopicLevels, "must be in 1..65535")
	}
	if c.MQTT.MaxTopicLength < 1 || c.MQTT.MaxTopicLength > 65535 {
		bad("mqtt.max_topic_length", c.MQTT.MaxTopicLength, "must be in 1..65535")
	}
	if c.MQTT.MaxInflight < 1 || c.MQTT.MaxInflight > 65535 {
		bad("mqtt.max_inflight", c.MQTT.MaxInflight, "must be in 1..65535")
	}
	if c.MQTT.WriteTimeout <= 0 {
		bad("mqtt.write_timeout", c.MQTT.WriteTimeout, "must be positive")
	}
	if c.MQTT.ClientWritesPending < 1 {
		bad("mqtt.client_writes_pending", c.MQTT.ClientWritesPending, "must be at least 1")
	}
	for i, b := range c.Kafka.Brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			bad(fmt.Sprintf("kafka.brokers[%d]", i), b, "not a host:port address: %v", err)
		}
	}
	if c.Kafka.EmbeddedPort < 0 || c.Kafka.EmbeddedPort > 65535 {
		bad("kafka.embedded_port", c.Kafka.EmbeddedPort, "must be in 0..65535 (0: any free port)")
	}
	switch c.Kafka.Acks {
	case "all", "one":
	case "none":
		bad("kafka.acks", c.Kafka.Acks, "refused: with no Kafka acknowledgement a PUBACK would promise nothing (use all, or one)")
	default:
		bad("kafka.acks", c.Kafka.Acks, "must be all or one")
	}
	if c.Kafka.AckTimeout <= 0 {
		bad("kafka.ack_timeout", c.Kafka.AckTimeout, "must be positive")
	}
	if c.Kafka.Linger < 0 {
		bad("kafka.linger", c.Kafka.Linger, "must not be negative")
	}
	if c.Kafka.MaxBatch < 1 {
		bad("kafka.max_batch", c.Kafka.MaxBatch, "must be at least 1")
	}
	if c.Kafka.MaxBatchBytes < 1024 {
		bad("kafka.max_batch_bytes", c.Kafka.MaxBatchBytes, "must be at least 1024")
	}
	if c.Kafka.IsolationLevel != readCommitted && c.Kafka.IsolationLevel != readUncommitted {
		bad("kafka.isolation_level", c.Kafka.IsolationLevel, "must be %s or %s", readCommitted, readUncommitted)
	}
	if err := producer.CheckCompression(c.Kafka.Compression); err != nil {
		bad("kafka.compression", c.Kafka.Compression, "%v", err)
	}
	if c.Kafka.Partitions < 1 {
		bad("kafka.partitions", c.Kafka.Partitions, "must be at least 1")
	}
	if rf := c.Kafka.ReplicationFactor; rf != clusterReplicationFactor && (rf < 1 || rf > math.MaxInt16) {
		bad("kafka.replication_factor", rf, "must be -1 (the cluster's default.replication.factor) or 1..%d", math.MaxInt16)
	}
	for _, st := range []struct{ key, topic string }{{"state.sessions_topic", c.State.SessionsTopic}, {"state.retained_topic", c.State.RetainedTopic}} {
		if err := topicmap.ValidKafkaTopic(st.topic); err != nil {
			bad(st.key, st.topic, "%v", err)
		}
	}
	if c.State.SessionsTopic != "" && c.State.SessionsTopic == c.State.RetainedTopic {
		bad("state.retained_topic", c.State.RetainedTopic, "must differ from state.sessions_topic")
	}
	if c.State.MaxQueued < 0 {
		bad("state.max_queued", c.State.MaxQueued, "must be 0 (no cap) or more")
	}
	if c.State.Partitions < 1 {
		bad("state.partitions", c.State.Partitions, "must be at least 1")
	}
	if c.State.HeartbeatInterval < 100*time.Millisecond {
		bad("state.heartbeat_interval", c.State.HeartbeatInterval, "must be at least 100ms")
	}
	if c.State.InstanceLapse <= 2*c.State.HeartbeatInterval {
		bad("state.instance_lapse", c.State.InstanceLapse, "must exceed 2x state.heartbeat_interval (%s)", c.State.HeartbeatInterval)
	}
	if c.State.ConnectTimeout <= 0 {
		bad("state.connect_timeout", c.State.ConnectTimeout, "must be positive")
	}
	if c.Kafka.MaxCreatedTopics < 0 {
		bad("kafka.max_created_topics", c.Kafka.MaxCreatedTopics, "must not be negative")
	}
	switch strings.ToUpper(c.Kafka.SASL.Mechanism) {
	case "", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
	default:
		bad("kafka.sasl.mechanism", c.Kafka.SASL.Mechanism, "must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
	}
	if c.Kafka.SASL.Mechanism != "" && c.Kafka.SASL.Username == "" {
		bad("kafka.sasl.username", `""`, "required with kafka.sasl.mechanism")
	}
	if c.Kafka.SASL.Mechanism != "" && c.Kafka.SASL.Password == "" {
		bad("kafka.sasl.password", `""`, "required with kafka.sasl.mechanism (prefer the environment: FERRY_KAFKA_SASL_PASSWORD)")
	}
	if c.Ring.Capacity < 2 || c.Ring.Capacity&(c.Ring.Capacity-1) != 0 {
		bad("ring.capacity", c.Ring.Capacity, "must be a power of two >= 2")
	}
	switch c.Ring.QoS0Policy {
	case "drop-newest", "drop-oldest", "block":
	default:
		bad("ring.qos0_policy", c.Ring.QoS0Policy, "must be drop-newest, drop-oldest or block")
	}
	if _, err := topicmap.New(c.Topics); err != nil {
		errs = append(errs, fmt.Errorf("config topics: %w", err))
	}
	if set, err := topicmap.ParseHeaderSet(c.Kafka.Headers); err != nil {
		bad("kafka.headers", c.Kafka.Headers, "%v", err)
	} else if err := c.Topics.CheckHeaders(set); err != nil {
		bad("kafka.headers", c.Kafka.Headers, "%v", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	for i, t := range c.Reverse.Topics {
		if err := reverse.ValidTopic(t); err != nil {
			bad(fmt.Sprintf("reverse.topics[%d]", i), t, "%v", err)
		}
	}
	switch c.Reverse.StartOffset {
	case "latest", "earliest":
	default:
		bad("reverse.start_offset", c.Reverse.StartOffset, "must be latest or earliest")
	}
	if len(c.Reverse.Topics) > 0 && c.Reverse.Refresh <= 0 {
		bad("reverse.refresh", c.Reverse.Refresh, "must be positive")
	}
	if t := c.Share.SessionTimeout; t < share.MinSessionTimeout || t > share.MaxSessionTimeout {
		bad("share.session_timeout", t, "must be within Kafka's group.min.session.timeout.ms and group.max.session.timeout.ms (6s to 30m by default)")
	}
	if n := c.Share.MaxInflight; n < 1 || n > share.MaxMaxInflight {
		bad("share.max_inflight", n, "must be 1 to %d", share.MaxMaxInflight)
	}
	if c.Storage.Dir != "" {
		bad("storage.dir", c.Storage.Dir, "was removed: sessions, their queued messages (as positions in Kafka) and retained messages live in Kafka (state.sessions_topic, state.retained_topic); remove the key (and any volume for it)")
	}

	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", c.Log.Level, "must be debug, info, warn or error")
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		bad("log.format", c.Log.Format, "must be text or json")
	}
	if c.Runtime.GCPercent < 25 || c.Runtime.GCPercent > 10000 {
		bad("runtime.gc_percent", c.Runtime.GCPercent, "must be between 25 and 10000 (Go's default is 100; GOGC, when set, wins)")
	}
	c.HTTP.validate(bad)
	if c.ShutdownTimeout <= 0 {
		bad("shutdown_timeout", c.ShutdownTimeout, "must be positive")
	}
	return errors.Join(errs...)
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// validate reports every invalid filter of the ACL under key prefix.
func (a ACL) validate(prefix string, bad func(key string, value any, format string, args ...any)) {
	for _, l := range []struct {
		key     string
		filters []string
	}{{"publish", a.Publish}, {"subscribe", a.Subscribe}, {"deny_publish", a.DenyPublish}, {"deny_subscribe", a.DenySubscribe}} {
		for j, f := range l.filters {
			if !validFilter(f) {
				bad(fmt.Sprintf("%s.%s[%d]", prefix, l.key, j), f, "not a valid MQTT topic filter")
			}
		}
	}
}

// validFilter reports whether f is a valid MQTT topic filter.
func validFilter(f string) bool {
	if f == "" {
		return false
	}
	levels := strings.Split(f, "/")
	for i, l := range levels {
		if l == "#" && i != len(levels)-1 {
			return false
		}
		if len(l) > 1 && strings.ContainsAny(l, "#+") {
			return false
		}
	}
	return true
}
