package admin

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound: no such client, session or retained message.
var ErrNotFound = errors.New("not found")

// Backend is what the API reads and asks of the cluster (package
// admin/backend).
// Every method answers for the whole cluster, from any instance.
type Backend interface {
	Instances(ctx context.Context) ([]Instance, error)
	// Client describes a client id: connected or not, and where.
	Client(ctx context.Context, id string) (*Client, error)
	SessionPage(q Page, connected *bool) ([]SessionItem, bool)
	// Session is a session's record with its lag (ErrNotFound: none).
	Session(ctx context.Context, id string) (*Session, error)
	RetainedPage(q Page) ([]RetainedItem, bool)
	Route(q RouteQuery) (*Route, error)
	// Disconnect has the client's instance disconnect it (MQTT 5: 0x98
	// Administrative action); ErrNotFound when it is not connected.
	Disconnect(ctx context.Context, id, by string) (*ActionResult, error)
	// EndSession ends the session everywhere, its client disconnected
	// first if connected; ErrNotFound when there is none.
	EndSession(ctx context.Context, id, by string) (*ActionResult, error)
	// ClearRetained clears a retained message cluster-wide; ErrNotFound
	// when there is none.
	ClearRetained(ctx context.Context, topic, by string) (*ActionResult, error)
}

// Page is a listing's query: keys starting with Prefix, after After, at
// most Limit.
type Page struct {
	Prefix, After string
	Limit         int
}

// Instance is one live instance, from its heartbeats.
type Instance struct {
	ID       string            `json:"id"`
	Host     string            `json:"host"`
	PID      int               `json:"pid"`
	HTTP     string            `json:"http,omitempty"`
	MQTT     map[string]string `json:"mqtt,omitempty"`
	Started  time.Time         `json:"started"`
	Clients  int               `json:"clients_connected"`
	Version  string            `json:"version,omitempty"`
	LastSeen time.Time         `json:"last_seen"`
}

// Client is what is known of one client id.
type Client struct {
	ClientID       string         `json:"client_id"`
	Connected      bool           `json:"connected"`
	Instance       string         `json:"instance,omitempty"`
	Username       string         `json:"username,omitempty"`
	Protocol       byte           `json:"protocol,omitempty"`
	Remote         string         `json:"remote,omitempty"`
	Listener       string         `json:"listener,omitempty"`
	ConnectedSince *time.Time     `json:"connected_since,omitempty"`
	Keepalive      uint16         `json:"keepalive,omitempty"`
	Subscriptions  []Subscription `json:"subscriptions"`
	Inflight       int            `json:"inflight"`
	CleanSession   bool           `json:"clean_session"`
}

// Subscription is one subscription of a client or session.
type Subscription struct {
	Filter            string `json:"filter"`
	QoS               byte   `json:"qos"`
	NoLocal           bool   `json:"no_local,omitempty"`
	RetainAsPublished bool   `json:"retain_as_published,omitempty"`
	RetainHandling    byte   `json:"retain_handling,omitempty"`
	Identifier        int    `json:"identifier,omitempty"`
}

// SessionItem is one session of a listing.
type SessionItem struct {
	ClientID  string     `json:"client_id"`
	Connected bool       `json:"connected"`
	Owner     string     `json:"owner,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// Session is one persistent session with what it owes.
type Session struct {
	ClientID       string         `json:"client_id"`
	Owner          string         `json:"owner"`
	Connected      bool           `json:"connected"`
	DisconnectedAt *time.Time     `json:"disconnected_at,omitempty"`
	ExpiryInterval uint32         `json:"expiry_interval"`
	ExpiresAt      *time.Time     `json:"expires_at,omitempty"`
	Protocol       byte           `json:"protocol"`
	Username       string         `json:"username,omitempty"`
	Subscriptions  []Subscription `json:"subscriptions"`
	Partitions     []Partition    `json:"partitions"`
	Pending        int            `json:"pending"`
	// Lag is the sum of the partitions' lags.
	Lag int64 `json:"lag"`
}

// Partition is a session's place in one Kafka partition.
type Partition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Position  int64  `json:"position"`
	End       int64  `json:"end"`
	// Lag is End minus Position: the records the session has not been
	// given (what matches its subscriptions of them it owes).
	Lag int64 `json:"lag"`
}

// RetainedItem is one retained message (never its payload).
type RetainedItem struct {
	Topic   string    `json:"topic"`
	Size    int       `json:"size"`
	QoS     byte      `json:"qos"`
	Created time.Time `json:"created"`
	AgeSec  int64     `json:"age_seconds"`
}

// RouteQuery names one topic: MQTTTopic or KafkaTopic; for an MQTT topic,
// the publish whose record is shown (its QoS, retain flag and client id
// are in the record's standard headers).
type RouteQuery struct {
	MQTTTopic, KafkaTopic string
	QoS                   byte
	Retain                bool
	ClientID              string
}

// Route is what the topic map does with a topic.
type Route struct {
	// Forward (an MQTT topic): the Kafka record it becomes.
	MQTTTopic  string `json:"mqtt_topic,omitempty"`
	KafkaTopic string `json:"kafka_topic,omitempty"`
	Key        string `json:"key,omitempty"`
	Rule       int    `json:"rule"`
	// Headers are the record's headers in the order the forward path
	// writes them: the standard ones (kafka.headers; mqtt.packet_id is
	// the publish's own), the rule's, then the publish's MQTT 5 user
	// properties (none here).
	Headers  []Header `json:"headers,omitempty"`
	Excluded bool     `json:"excluded,omitempty"`
	// Reverse (a Kafka topic): the MQTT message a record reaches.
	QoS      byte   `json:"qos,omitempty"`
	Retain   bool   `json:"retain,omitempty"`
	Consumed bool   `json:"consumed,omitempty"`
	Error    string `json:"error,omitempty"`
}

// Header is a Kafka header a forward rule sets.
type Header struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// ActionResult is what an action did.
type ActionResult struct {
	Action   string `json:"action"`
	Target   string `json:"target"`
	Done     bool   `json:"done"`
	Instance string `json:"instance,omitempty"`
	Detail   string `json:"detail,omitempty"`
}
