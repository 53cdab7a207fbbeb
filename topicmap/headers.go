package topicmap

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Standard Kafka header names, defined here and nowhere else. Values are ASCII text:
// HeaderQoS "0".."2", HeaderRetain "true"/"false", HeaderPacketID and HeaderSeq decimal.
// Every header whose name starts with "mqtt." or "ferry." is reserved for Ferry.
const (
	HeaderMQTTTopic = "mqtt.topic"     // the original MQTT topic
	HeaderQoS       = "mqtt.qos"       // QoS the message was published with
	HeaderRetain    = "mqtt.retain"    // retain flag of the publish
	HeaderClientID  = "mqtt.client_id" // publishing client
	HeaderPacketID  = "mqtt.packet_id" // MQTT packet id (QoS > 0)
	HeaderOrigin    = "ferry.origin"   // producing Ferry instance id (loop prevention)
	HeaderSeq       = "ferry.seq"      // per-instance sequence number (dedup)
	HeaderExpiry    = "mqtt.expiry"    // MQTT 5 Message Expiry Interval, seconds (when set)
)

// Header is one Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// UserProperty is one MQTT v5 user property (a UTF-8 string pair).
type UserProperty struct {
	Key   string
	Value string
}

// IsReservedHeader reports whether key is reserved for Ferry's standard headers
// (prefix "mqtt." or "ferry.").
func IsReservedHeader(key string) bool {
	return strings.HasPrefix(key, "mqtt.") || strings.HasPrefix(key, "ferry.")
}

// UserPropsToHeaders appends one Kafka header per MQTT v5 user property to dst, in order
// (duplicates kept, as both protocols allow them). Properties with a reserved key are
// dropped, so a client cannot spoof HeaderOrigin or HeaderSeq; the number dropped is returned.
// Map.UserPropsToHeaders also drops the header names of forward rules.
func UserPropsToHeaders(dst []Header, props []UserProperty) ([]Header, int) {
	return appendUserProps(dst, props, nil)
}

// IsReservedHeader reports whether key is reserved for Ferry: a standard header name
// (IsReservedHeader) or a header some forward rule of m sets. A client's user property
// never supplies such a header.
func (m *Map) IsReservedHeader(key string) bool {
	if IsReservedHeader(key) {
		return true
	}
	_, ok := m.ruleHdrs[key]
	return ok
}

// UserPropsToHeaders is the package's UserPropsToHeaders for a publish routed by m: it also
// drops properties named like a header any forward rule sets (a consumer trusts those to
// come from the rule, whichever rule routed the message). The number dropped is returned.
func (m *Map) UserPropsToHeaders(dst []Header, props []UserProperty) ([]Header, int) {
	return appendUserProps(dst, props, m.ruleHdrs)
}

// appendUserProps is the one builder behind both UserPropsToHeaders.
func appendUserProps(dst []Header, props []UserProperty, ruleHdrs map[string]struct{}) ([]Header, int) {
	dropped := 0
	for _, p := range props {
		if _, rule := ruleHdrs[p.Key]; rule || IsReservedHeader(p.Key) {
			dropped++
			continue
		}
		dst = append(dst, Header{Key: p.Key, Value: []byte(p.Value)})
	}
	return dst, dropped
}

// HeadersToUserProps appends one MQTT v5 user property per Kafka header to dst, in order.
// Reserved headers are skipped (they become the MQTT topic, QoS and so on, not properties),
// as are headers whose key or value is not valid UTF-8 or contains U+0000, which MQTT strings
// cannot carry; the number of non-reserved headers dropped is returned.
func HeadersToUserProps(dst []UserProperty, headers []Header) ([]UserProperty, int) {
	dropped := 0
	for _, h := range headers {
		if IsReservedHeader(h.Key) {
			continue
		}
		if !mqttString(h.Key) || !utf8.Valid(h.Value) || strings.IndexByte(string(h.Value), 0) >= 0 {
			dropped++
			continue
		}
		dst = append(dst, UserProperty{Key: h.Key, Value: string(h.Value)})
	}
	return dst, dropped
}

func mqttString(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// Standard holds the values carried in the standard headers (AppendStandard
// writes them, ParseStandard reads them).
type Standard struct {
	Topic    string // HeaderMQTTTopic; omitted when empty
	QoS      byte   // HeaderQoS
	Retain   bool   // HeaderRetain
	ClientID string // HeaderClientID; omitted when empty
	PacketID uint16 // HeaderPacketID; omitted when 0
	Origin   string // HeaderOrigin; omitted when empty
	Seq      uint64 // HeaderSeq; omitted when 0
	Expiry   uint32 // HeaderExpiry; omitted when 0

	// HasQoS and HasRetain report that ParseStandard found a well-formed HeaderQoS /
	// HeaderRetain (the first of its name); AppendStandard ignores them.
	HasQoS, HasRetain bool
}

// ParseStandard reads the standard headers from headers (the first of each name wins).
// Malformed numeric or boolean values are ignored and leave the zero value; ok reports
// whether every standard header present was well formed.
func ParseStandard(headers []Header) (s Standard, ok bool) {
	ok = true
	var seen HeaderSet
	for _, h := range headers {
		var bit HeaderSet
		switch h.Key {
		case HeaderMQTTTopic:
			bit = bitTopic
		case HeaderQoS:
			bit = bitQoS
		case HeaderRetain:
			bit = bitRetain
		case HeaderClientID:
			bit = bitClientID
		case HeaderPacketID:
			bit = bitPacketID
		case HeaderOrigin:
			bit = bitOrigin
		case HeaderSeq:
			bit = bitSeq
		case HeaderExpiry:
			bit = bitExpiry
		default:
			continue
		}
		if seen&bit != 0 {
			continue
		}
		seen |= bit
		// The numbers are parsed from a string(h.Value) that does not
		// escape (no allocation: a replay parses every record it reads);
		// only the string fields are copied.
		switch bit {
		case bitTopic:
			s.Topic = string(h.Value)
		case bitQoS:
			q, err := strconv.ParseUint(string(h.Value), 10, 8)
			if err != nil || q > 2 {
				ok = false
				continue
			}
			s.QoS, s.HasQoS = byte(q), true
		case bitRetain:
			r, err := strconv.ParseBool(string(h.Value))
			if err != nil {
				ok = false
				continue
			}
			s.Retain, s.HasRetain = r, true
		case bitClientID:
			s.ClientID = string(h.Value)
		case bitPacketID:
			p, err := strconv.ParseUint(string(h.Value), 10, 16)
			if err != nil {
				ok = false
				continue
			}
			s.PacketID = uint16(p)
		case bitOrigin:
			s.Origin = string(h.Value)
		case bitSeq:
			n, err := strconv.ParseUint(string(h.Value), 10, 64)
			if err != nil {
				ok = false
				continue
			}
			s.Seq = n
		case bitExpiry:
			n, err := strconv.ParseUint(string(h.Value), 10, 32)
			if err != nil {
				ok = false
				continue
			}
			s.Expiry = uint32(n)
		}
	}
	return s, ok
}
