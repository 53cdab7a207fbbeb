package admin

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound: no such client, session or retained message.
var ErrNotFound = errors.New("not found")

// Backend is what the API reads and asks of the cluster (the bridge).
// Every method answers for the whole cluster, from any instance.
type Backend interface {
	Instances(ctx context.Context) ([]Instance, error)
	// Client describes a client id: connected or not, and where.
	Client(ctx context.Context, id string) (*Client, error)
	Route(q RouteQuery) (*Route, error)
	// Disconnect has the client's instance disconnect it (MQTT 5: 0x98
	// Administrative action); ErrNotFound when it is not connected.
	Disconnect(ctx context.Context, id, by string) (*ActionResult, error)
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
