package session

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ferry-bridge/ferry/internal/ratelimit"
	"github.com/ferry-bridge/ferry/state"
)

// Retained keeps retained messages in the retained table (package
// state): key = MQTT topic, value = the message (JSON, RetainedValue); an
// empty retained PUBLISH, which clears a topic's retained message in MQTT,
// is a tombstone (a null value) there. A retained message is never an empty
// value, so the two cannot be confused.
//
// Every instance reads the table into its broker's retained index, so a
// message retained on one instance is served by all. The write of a
// client's retained QoS 1/2 publish is part of its acknowledgement: the
// PUBACK/PUBREC leaves once Kafka has both the record of the forward path
// and the retained record (the caller's forward hook). Retained messages that arrive from
// Kafka (the mqtt.retain header) are written by the reverse path before it
// commits their offset; Wills and QoS 0 publishes are written best effort.
type Retained struct {
	log     *slog.Logger
	server  *mqtt.Server
	table   *state.Table
	metrics *stateMetrics
	logs    *ratelimit.Limiter
}

// RetainedValue is a retained table value.
type RetainedValue struct {
	Msg             storage.Message `json:"msg"`
	Expiry          int64           `json:"expiry,omitempty"` // unix seconds; 0: none
	ProtocolVersion byte            `json:"protocol"`
}

// expiry is when the message expires (unix seconds; 0: never): what its
// publisher asked (the Message Expiry Interval stored with it) from when it
// was received, capped by limit (mqtt.max_message_expiry, 0: none), as
// mochi sets it on a message it receives (Server.SetMessageExpiry). Ferry
// before mochi change 10 (expiry) wrote mochi's default maximum, a day
// after the message was received, into the record of every message that
// asked none (MQTT 3.1.1's and Wills' included), and capped what was asked
// at a day: such records are served again, as asked.
func (rv *RetainedValue) expiry(limit int64) int64 {
	asked := int64(rv.Msg.Properties.MessageExpiryInterval)
	if asked == 0 {
		return 0
	}
	if limit > 0 {
		asked = min(asked, limit)
	}
	return rv.Msg.Created + asked
}

func newRetained(log *slog.Logger, server *mqtt.Server, m *stateMetrics) *Retained {
	log = log.With("component", "retained")
	return &Retained{log: log, server: server, metrics: m, logs: ratelimit.New(log, 10*time.Second)}
}

// onChange applies one record read from the table (reader goroutine).
func (r *Retained) onChange(c state.Change) {
	if !c.Superseded {
		r.apply(c.Key, c.Value)
	}
}

func (r *Retained) apply(topic string, v []byte) bool {
	if v == nil {
		r.server.Topics.RetainMessage(packets.Packet{TopicName: topic})
		return false
	}
	var rv RetainedValue
	if err := json.Unmarshal(v, &rv); err != nil {
		r.logs.Warn("decode:"+topic, "unreadable retained record ignored", "topic", topic, "err", err)
		return false
	}
	pk := rv.Msg.ToPacket()
	pk.FixedHeader.Retain = true
	if pk.Created == 0 {
		// A record written without a creation time (the reverse path's
		// before): mochi removed a retained message older than its maximum
		// message expiry every second, and a creation time of 0 is 56 years
		// old; an expiry asked counts from now.
		pk.Created = time.Now().Unix()
		rv.Msg.Created = pk.Created
	}
	pk.Expiry = rv.expiry(r.server.Options.Capabilities.MaximumMessageExpiryInterval)
	pk.ProtocolVersion = rv.ProtocolVersion
	if len(pk.Payload) == 0 {
		return false
	}
	if pk.Expiry > 0 && pk.Expiry <= time.Now().Unix() {
		// Expired before it was read [MQTT-3.3.2-5] (a record read at a
		// start, or aged while Kafka held it): mochi's sweep would remove
		// it within a second, and serve it to a SUBSCRIBE meanwhile.
		r.server.Topics.RetainMessage(packets.Packet{TopicName: topic})
		atomic.StoreInt64(&r.server.Info.Retained, int64(r.server.Topics.Retained.Len()))
		return false
	}
	r.server.Topics.RetainMessage(pk)
	atomic.StoreInt64(&r.server.Info.Retained, int64(r.server.Topics.Retained.Len()))
	return true
}

// Write records pk's retained change (set, or clear for an empty payload)
// and calls done with the outcome (done may be nil): nil once Kafka
// acknowledged the record (acks=all), else an error wrapping
// ErrKafkaUnavailable. client is the publishing client's id. Calls for one
// topic are appended in call order.
func (r *Retained) Write(client string, pk *packets.Packet, done func(error)) {
	var v []byte
	if len(pk.Payload) > 0 {
		rv := RetainedValue{Msg: *toStored(client, *pk), Expiry: pk.Expiry, ProtocolVersion: pk.ProtocolVersion}
		if rv.Msg.Created == 0 {
			rv.Msg.Created = time.Now().Unix() // see apply
		}
		rv.Msg.FixedHeader.Retain = true
		rv.Msg.PacketID = 0
		var err error
		if v, err = json.Marshal(&rv); err != nil {
			if done != nil {
				done(fmt.Errorf("retained %q: encode: %w", pk.TopicName, err))
			}
			return
		}
	}
	topic := pk.TopicName
	r.table.WriteAsync(topic, v, func(err error) {
		if err != nil {
			r.metrics.retainedWrites.WithLabelValues("error").Inc()
			r.logs.Warn("write:"+topic, "retained message not written to Kafka", "topic", topic, "err", err)
			err = fmt.Errorf("%w: retained message: %v", ErrKafkaUnavailable, err)
		} else {
			r.metrics.retainedWrites.WithLabelValues("ok").Inc()
		}
		if done != nil {
			done(err)
		}
	})
}

// toStored is a message in mochi's storage type (the retained table's value).
func toStored(client string, pk packets.Packet) *storage.Message {
	props := pk.Properties.Copy(false)
	return &storage.Message{
		Client: client, Origin: pk.Origin, PacketID: pk.PacketID, FixedHeader: pk.FixedHeader,
		TopicName: pk.TopicName, Payload: pk.Payload, Created: pk.Created,
		Properties: storage.MessageProperties{
			PayloadFormat: props.PayloadFormat, PayloadFormatFlag: props.PayloadFormatFlag,
			MessageExpiryInterval: props.MessageExpiryInterval, ContentType: props.ContentType,
			ResponseTopic: props.ResponseTopic, CorrelationData: props.CorrelationData,
			SubscriptionIdentifier: props.SubscriptionIdentifier, User: props.User,
		},
	}
}
