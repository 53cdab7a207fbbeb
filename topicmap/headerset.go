package topicmap

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// HeaderSet is a set of standard headers: which of them forward records carry
// (the bridge's kafka.headers). The zero value is the empty set.
type HeaderSet uint8

// One bit per standard header (ParseStandard uses the same bits).
const (
	bitTopic HeaderSet = 1 << iota
	bitQoS
	bitRetain
	bitClientID
	bitPacketID
	bitOrigin
	bitSeq
	bitExpiry
)

// The header sets kafka.headers names.
const (
	// RequiredHeaders are read by Ferry itself and keep a promise whatever the
	// configuration (see headerNeeds): a set without one of them is refused.
	RequiredHeaders = bitQoS | bitRetain | bitExpiry | bitClientID | bitOrigin
	// DefaultHeaders ("default") is RequiredHeaders plus HeaderMQTTTopic (the
	// reverse path's and session replay's MQTT topic) and HeaderPacketID (the
	// consumers' deduplication key, with HeaderOrigin and HeaderClientID).
	DefaultHeaders = RequiredHeaders | bitTopic | bitPacketID
	// AllHeaders ("all") is every standard header: the set of Ferry before
	// kafka.headers (DefaultHeaders plus HeaderSeq).
	AllHeaders = DefaultHeaders | bitSeq
)

// Set names for ParseHeaderSet.
const (
	HeaderSetDefault = "default"
	HeaderSetAll     = "all"
)

// headerNames lists the standard headers in the order AppendStandard writes them.
var headerNames = [...]struct {
	name string
	bit  HeaderSet
}{
	{HeaderMQTTTopic, bitTopic}, {HeaderQoS, bitQoS}, {HeaderClientID, bitClientID}, {HeaderOrigin, bitOrigin},
	{HeaderSeq, bitSeq}, {HeaderPacketID, bitPacketID}, {HeaderRetain, bitRetain}, {HeaderExpiry, bitExpiry},
}

// headerNeeds says, for each required header, what reads it.
var headerNeeds = [...]struct {
	bit  HeaderSet
	name string
	why  string
}{
	{bitQoS, HeaderQoS, "the reverse path and session replay deliver at most at the published QoS by it (without it a QoS 0 publish is delivered at QoS 1)"},
	{bitRetain, HeaderRetain, "the reverse path and session replay carry the retain flag by it"},
	{bitExpiry, HeaderExpiry, "session replay drops expired messages and counts down the MQTT 5 Message Expiry Interval by it"},
	{bitClientID, HeaderClientID, "session replay applies MQTT 5 No Local by it (a resumed session must not get its own publishes)"},
	{bitOrigin, HeaderOrigin, "loop prevention: the reverse path of every instance skips its own records by it (reverse.skip_own) and leaves a peer's retained records to the peer"},
}

// ParseHeaderSet is the set named by names: standard header names (exact, as
// HeaderMQTTTopic...), HeaderSetDefault and HeaderSetAll, in any combination.
// No names is DefaultHeaders. An unknown name is an error.
func ParseHeaderSet(names []string) (HeaderSet, error) {
	if len(names) == 0 {
		return DefaultHeaders, nil
	}
	var s HeaderSet
	var unknown []string
	for _, n := range names {
		switch n {
		case HeaderSetDefault:
			s |= DefaultHeaders
			continue
		case HeaderSetAll:
			s |= AllHeaders
			continue
		}
		bit := headerBit(n)
		if bit == 0 {
			unknown = append(unknown, strconv.Quote(n))
			continue
		}
		s |= bit
	}
	if len(unknown) > 0 {
		return 0, fmt.Errorf("unknown header %s: want %s, %s or standard header names (%s)",
			strings.Join(unknown, ", "), HeaderSetDefault, HeaderSetAll, strings.Join(AllHeaders.Names(), ", "))
	}
	return s, nil
}

func headerBit(name string) HeaderSet {
	for _, h := range headerNames {
		if h.name == name {
			return h.bit
		}
	}
	return 0
}

// Has reports whether s holds the standard header name.
func (s HeaderSet) Has(name string) bool {
	bit := headerBit(name)
	return bit != 0 && s&bit != 0
}

// Len is the number of headers in s.
func (s HeaderSet) Len() int { return bits.OnesCount8(uint8(s)) }

// Names lists the headers of s in the order AppendStandard writes them.
func (s HeaderSet) Names() []string {
	var out []string
	for _, h := range headerNames {
		if s&h.bit != 0 {
			out = append(out, h.name)
		}
	}
	return out
}

func (s HeaderSet) String() string { return "[" + strings.Join(s.Names(), ", ") + "]" }

// CheckHeaders reports every promise forward records carrying only the headers
// of s would break under c; nil when none. Required headers (RequiredHeaders)
// must be in s; so must one deduplication key (HeaderPacketID or HeaderSeq);
// HeaderMQTTTopic may be left out only when the reverse path and session replay
// get the MQTT topic back from the Kafka topic alone: no forward rule sets a
// topic (every record goes to its default-rule name, which DecodeTopic turns
// back into the MQTT topic) and no reverse rule sets an MQTT topic.
func (c Config) CheckHeaders(s HeaderSet) error {
	var errs []error
	for _, n := range headerNeeds {
		if s&n.bit == 0 {
			errs = append(errs, fmt.Errorf("%s is required: %s", n.name, n.why))
		}
	}
	if s&(bitPacketID|bitSeq) == 0 {
		errs = append(errs, fmt.Errorf("%s or %s is required: consumers deduplicate on %s + %s + %s, or on %s + %s (docs/delivery.md)",
			HeaderPacketID, HeaderSeq, HeaderOrigin, HeaderClientID, HeaderPacketID, HeaderOrigin, HeaderSeq))
	}
	if s&bitTopic == 0 {
		for i, r := range c.Forward {
			if r.Topic != "" {
				errs = append(errs, fmt.Errorf("%s is required: forward rule %d sets topic %q, so the reverse path and session replay cannot tell a record's MQTT topic from its Kafka topic",
					HeaderMQTTTopic, i, r.Topic))
			}
		}
		for i, r := range c.Reverse {
			if r.MQTT != "" {
				errs = append(errs, fmt.Errorf("%s is required: reverse rule %d sets mqtt %q, which would replace the MQTT topic of every record of %q without it",
					HeaderMQTTTopic, i, r.MQTT, r.Kafka))
			}
		}
	}
	return errors.Join(errs...)
}

// HeaderType is a Kafka client's record header: a struct with Header's fields
// (Header itself, kafka-go's kafka.Header, franz-go's kgo.RecordHeader), so
// that AppendStandard builds them in place.
type HeaderType interface {
	~struct {
		Key   string
		Value []byte
	}
}

// HeaderBuilder builds the standard headers of forward records: one header set,
// one origin. It holds only values computed once (the origin, the QoS digits,
// "true"), so building a record's headers copies no constant, formats nothing
// with fmt and allocates once for the record's own values; it is safe for
// concurrent use.
type HeaderBuilder struct {
	set     HeaderSet
	origin  []byte
	qos     [3][]byte
	trueVal []byte
}

// NewHeaderBuilder returns the builder of the headers of set, with origin as
// HeaderOrigin.
func NewHeaderBuilder(set HeaderSet, origin string) *HeaderBuilder {
	return &HeaderBuilder{set: set, origin: []byte(origin),
		qos: [3][]byte{[]byte("0"), []byte("1"), []byte("2")}, trueVal: []byte("true")}
}

// Set is the header set b builds.
func (b *HeaderBuilder) Set() HeaderSet { return b.set }

// Count is the number of headers AppendStandard(b, dst, s) appends, for the
// capacity of dst.
func (b *HeaderBuilder) Count(s Standard) int {
	set := b.set
	if s.Topic == "" {
		set &^= bitTopic
	}
	if s.QoS > 2 {
		set &^= bitQoS
	}
	if s.ClientID == "" {
		set &^= bitClientID
	}
	if len(b.origin) == 0 {
		set &^= bitOrigin
	}
	if s.Seq == 0 {
		set &^= bitSeq
	}
	if s.PacketID == 0 {
		set &^= bitPacketID
	}
	if !s.Retain {
		set &^= bitRetain
	}
	if s.Expiry == 0 {
		set &^= bitExpiry
	}
	return set.Len()
}

// AppendStandard appends to dst the headers of b's set that s has a value for,
// in the order of headerNames: HeaderMQTTTopic (omitted when s.Topic is empty),
// HeaderQoS, HeaderClientID (omitted when empty), HeaderOrigin (b's origin;
// s.Origin is not read), HeaderSeq (omitted when 0), HeaderPacketID (omitted
// when 0), HeaderRetain (only when set, as "true") and HeaderExpiry (omitted
// when 0). Values are ASCII as ParseStandard reads them; the variable ones
// share one allocation, each capped at its own length.
func AppendStandard[H HeaderType](b *HeaderBuilder, dst []H, s Standard) []H {
	return AppendStandardBuf(b, dst, nil, s, StandardBytes{})
}

// StandardBytes are a Standard's Topic and ClientID as bytes, for
// AppendStandardBuf to use as header values as they are, without copying:
// the caller never changes them (a connection's records may share them).
// Nil: copied.
type StandardBytes struct {
	Topic, ClientID []byte
}

// AppendStandardBuf is AppendStandard with the values of sb used as they are,
// and the other variable values written into buf's spare capacity when they
// fit (else into one allocation): a caller that keeps buf with the record
// builds its headers without allocating.
func AppendStandardBuf[H HeaderType](b *HeaderBuilder, dst []H, buf []byte, s Standard, sb StandardBytes) []H {
	set := b.set
	n := 0
	if set&bitTopic != 0 && sb.Topic == nil {
		n += len(s.Topic)
	}
	if set&bitClientID != 0 && sb.ClientID == nil {
		n += len(s.ClientID)
	}
	if set&bitSeq != 0 && s.Seq != 0 {
		n += 20
	}
	if set&bitPacketID != 0 && s.PacketID != 0 {
		n += 5
	}
	if set&bitExpiry != 0 && s.Expiry != 0 {
		n += 10
	}
	if n > cap(buf)-len(buf) {
		buf = make([]byte, 0, n)
	}
	// val returns what was appended to buf since start, capped.
	val := func(start int) []byte { return buf[start:len(buf):len(buf)] }
	// str is given (the caller's bytes) or v copied into buf.
	str := func(given []byte, v string) []byte {
		if given != nil {
			return given
		}
		start := len(buf)
		buf = append(buf, v...)
		return val(start)
	}
	if set&bitTopic != 0 && s.Topic != "" {
		dst = append(dst, H(Header{Key: HeaderMQTTTopic, Value: str(sb.Topic, s.Topic)}))
	}
	if set&bitQoS != 0 && s.QoS <= 2 {
		dst = append(dst, H(Header{Key: HeaderQoS, Value: b.qos[s.QoS]}))
	}
	if set&bitClientID != 0 && s.ClientID != "" {
		dst = append(dst, H(Header{Key: HeaderClientID, Value: str(sb.ClientID, s.ClientID)}))
	}
	if set&bitOrigin != 0 && len(b.origin) > 0 {
		dst = append(dst, H(Header{Key: HeaderOrigin, Value: b.origin}))
	}
	if set&bitSeq != 0 && s.Seq != 0 {
		start := len(buf)
		buf = strconv.AppendUint(buf, s.Seq, 10)
		dst = append(dst, H(Header{Key: HeaderSeq, Value: val(start)}))
	}
	if set&bitPacketID != 0 && s.PacketID != 0 {
		start := len(buf)
		buf = strconv.AppendUint(buf, uint64(s.PacketID), 10)
		dst = append(dst, H(Header{Key: HeaderPacketID, Value: val(start)}))
	}
	if set&bitRetain != 0 && s.Retain {
		dst = append(dst, H(Header{Key: HeaderRetain, Value: b.trueVal}))
	}
	if set&bitExpiry != 0 && s.Expiry != 0 {
		start := len(buf)
		buf = strconv.AppendUint(buf, uint64(s.Expiry), 10)
		dst = append(dst, H(Header{Key: HeaderExpiry, Value: val(start)}))
	}
	return dst
}
