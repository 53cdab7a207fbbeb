package reverse

import (
	"errors"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/topicmap"
)

// Skip reasons of a record that is not delivered (SkipReasons).
const (
	skipOwn        = "own_origin"
	skipExcluded   = "excluded"
	skipUnmappable = "unmappable"
	skipTooLarge   = "too_large"
)

// Converter turns Kafka records into MQTT PUBLISH packets: the topic map's
// reverse mapping, the QoS and retain flag the record's standard headers
// carry, its other headers as user properties, and the packet size limit.
// Its scratch buffers make it one goroutine's: each reader has its own.
type Converter struct {
	Topics        *topicmap.Map
	MaxPacketSize int

	hdrs  []topicmap.Header
	props []topicmap.UserProperty
}

// Converted is one record as a packet, or why it is not one.
type Converted struct {
	// Packet is the PUBLISH (packet id 0: the broker gives each delivery
	// its own).
	Packet packets.Packet
	// Std is the record's standard headers (ferry.origin, retain, qos).
	Std topicmap.Standard
	// Skip is the reason the record is not delivered ("": it is), one of
	// SkipReasons; Err says more for a log.
	Skip string
	Err  error
	// Size is the packet's size when Skip is too_large.
	Size int
}

// Convert converts rec; skipOwnOf, when not "", skips the records whose
// ferry.origin is that instance id.
func (c *Converter) Convert(rec *kgo.Record, skipOwnOf string) Converted {
	c.hdrs = c.hdrs[:0]
	for _, h := range rec.Headers {
		c.hdrs = append(c.hdrs, topicmap.Header{Key: h.Key, Value: h.Value})
	}
	std, _ := topicmap.ParseStandard(c.hdrs) // the first of each reserved header only
	if skipOwnOf != "" && std.Origin == skipOwnOf {
		return Converted{Std: std, Skip: skipOwn}
	}
	d, err := c.Topics.Reverse(rec.Topic, c.hdrs)
	if errors.Is(err, topicmap.ErrExcluded) {
		return Converted{Std: std, Skip: skipExcluded, Err: err}
	}
	if err != nil {
		return Converted{Std: std, Skip: skipUnmappable, Err: err}
	}
	c.props, _ = topicmap.HeadersToUserProps(c.props[:0], c.hdrs)
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: d.RecordQoS(std), Retain: d.Retain || std.HasRetain && std.Retain},
		TopicName:   d.Topic,
		Payload:     rec.Value,
	}
	if len(c.props) > 0 {
		pk.Properties.User = make([]packets.UserProperty, len(c.props))
		for i, p := range c.props {
			pk.Properties.User[i] = packets.UserProperty{Key: p.Key, Val: p.Value}
		}
	}
	if size := publishSize(&pk); size > c.MaxPacketSize {
		return Converted{Std: std, Skip: skipTooLarge, Size: size}
	}
	return Converted{Packet: pk, Std: std}
}
