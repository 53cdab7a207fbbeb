package topicmap

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// DefaultRule is the rule index reported for topics routed by the default rule.
const DefaultRule = -1

// ForwardRule routes MQTT topics matching Filter to Kafka.
type ForwardRule struct {
	// Filter is an MQTT topic filter ('+' and '#' allowed). Required.
	Filter string `mapstructure:"filter" yaml:"filter"`
	// Topic is the Kafka topic template. Default "": the default rule (EncodeTopic).
	Topic string `mapstructure:"topic" yaml:"topic"`
	// Key is the Kafka record key template. Default "": the MQTT topic.
	Key string `mapstructure:"key" yaml:"key"`
	// Headers are extra Kafka headers; values are templates. Names must not be reserved
	// ("mqtt." or "ferry." prefix).
	Headers map[string]string `mapstructure:"headers" yaml:"headers"`
}

// ReverseRule routes a Kafka topic to MQTT.
type ReverseRule struct {
	// Kafka is an exact Kafka topic name, or a regular expression between slashes
	// ("/^orders\\..*/"), matched against the whole name. Required.
	Kafka string `mapstructure:"kafka" yaml:"kafka"`
	// MQTT is the MQTT topic template ({topic}: the Kafka name, {default}: DecodeTopic of it,
	// {N}: regex capture group N). Default "": DecodeTopic.
	MQTT string `mapstructure:"mqtt" yaml:"mqtt"`
	// QoS for delivery to MQTT subscribers, 0..2 (each subscriber gets the lower of this
	// and its subscription's QoS). Default: nil, DefaultReverseQoS.
	QoS *byte `mapstructure:"qos" yaml:"qos"`
	// Retain flag for delivery. Default false.
	Retain bool `mapstructure:"retain" yaml:"retain"`
}

// Config is the routing configuration.
type Config struct {
	// Forward rules, MQTT -> Kafka. Default none: every topic takes the default rule.
	Forward []ForwardRule `mapstructure:"forward" yaml:"forward"`
	// Exclude lists MQTT filters never bridged in either direction. Default ["$SYS/#"]; a
	// configured list replaces the default, so keep "$SYS/#" in it.
	Exclude []string `mapstructure:"exclude" yaml:"exclude"`
	// Reverse rules, Kafka -> MQTT. Default none: DecodeTopic, DefaultReverseQoS, no retain.
	Reverse []ReverseRule `mapstructure:"reverse" yaml:"reverse"`
}

// DefaultReverseQoS is the delivery QoS of reverse-bridged records when no rule sets one:
// 1, so that each subscriber's own subscription QoS decides (MQTT delivers at the lower).
const DefaultReverseQoS byte = 1

// QoS returns a pointer to q, for ReverseRule.QoS.
func QoS(q byte) *byte { return &q }

// DefaultConfig returns the default configuration: no rules, "$SYS/#" excluded.
func DefaultConfig() Config {
	return Config{Exclude: []string{"$SYS/#"}}
}

// Route is where a forwarded message goes. A Route may share Key and Headers with the Map
// (for rules whose output is fixed): callers must not modify them.
type Route struct {
	Topic   string   // Kafka topic
	Key     []byte   // record key
	Headers []Header // the rule's extra headers (not the standard ones)
	Rule    int      // index of the forward rule, or DefaultRule
}

// Delivery is where a reverse-bridged message goes.
type Delivery struct {
	Topic  string // MQTT topic
	QoS    byte
	Retain bool
	// RuleQoS: a reverse rule set QoS (ReverseRule.QoS); else it is
	// DefaultReverseQoS.
	RuleQoS bool
}

// RecordQoS is the QoS a record with the standard headers std is
// delivered at: a rule's QoS, lowered by the record's mqtt.qos header;
// without a rule's, the header's (the QoS the MQTT publisher of a record
// Ferry wrote used, so that a QoS 2 publish reaches a QoS 2 subscriber at
// QoS 2 [MQTT-3.8.4-8]); else DefaultReverseQoS.
func (d Delivery) RecordQoS(std Standard) byte {
	switch {
	case !std.HasQoS:
		return d.QoS
	case d.RuleQoS:
		return min(d.QoS, std.QoS)
	default:
		return std.QoS
	}
}

type headerTmpl struct {
	key string
	val *template
}

type fwdRule struct {
	filter    string
	topic     *template // nil: default rule
	key       *template // nil: the MQTT topic
	keyBytes  []byte    // when key is fixed
	headers   []headerTmpl
	fixedHdrs []Header // when every header value is fixed
	hdrsFixed bool
	route     Route // complete when fixed
	fixed     bool
}

type revRule struct {
	re     *regexp.Regexp // nil: exact
	mqtt   *template      // nil: DecodeTopic
	groups bool           // template uses capture groups
	qos    byte
	setQoS bool // qos is the rule's own (ReverseRule.QoS)
	retain bool
}

// Map routes topics between MQTT and Kafka. It is immutable after New and safe for
// concurrent use.
type Map struct {
	fwd        []fwdRule
	exact      map[string]int32 // forward filters without wildcards
	trie       *node            // forward filters with wildcards
	exclExact  map[string]struct{}
	exclTrie   *node
	fixedNames map[string]int // KafkaMetricName(fixed rule topic) -> rule
	rev        []revRule
	revExact   map[string]int
	revRegex   []int
	ruleHdrs   map[string]struct{} // header names any forward rule sets
}

// New validates cfg and builds a Map. The first invalid rule is reported as a *RuleError.
func New(cfg Config) (*Map, error) {
	m := &Map{
		exact:      make(map[string]int32),
		trie:       newNode(),
		exclExact:  make(map[string]struct{}),
		exclTrie:   newNode(),
		fixedNames: make(map[string]int),
		revExact:   make(map[string]int),
		ruleHdrs:   make(map[string]struct{}),
	}
	for i, f := range cfg.Exclude {
		if reason := filterReason(f); reason != "" {
			return nil, &RuleError{Kind: "exclude", Index: i, Field: "filter", Text: f, Reason: reason}
		}
		if hasWildcard(f) {
			m.exclTrie.insert(f, int32(i))
		} else {
			m.exclExact[f] = struct{}{}
		}
	}
	for i, r := range cfg.Forward {
		fr, err := m.compileForward(i, r)
		if err != nil {
			return nil, err
		}
		m.fwd = append(m.fwd, fr)
	}
	for i, r := range cfg.Reverse {
		if err := m.addReverse(i, r); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Map) compileForward(i int, r ForwardRule) (fwdRule, error) {
	rerr := func(field, text, reason string) error {
		return &RuleError{Kind: "forward", Index: i, Field: field, Text: text, Reason: reason}
	}
	if reason := filterReason(r.Filter); reason != "" {
		return fwdRule{}, rerr("filter", r.Filter, reason)
	}
	levels := strings.Count(r.Filter, "/") + 1
	multi := strings.HasSuffix(r.Filter, "#")
	checkLevels := func(field string, t *template) error {
		if !multi && t.maxN > levels {
			return rerr(field, t.raw, fmt.Sprintf("uses level {%d} but filter %q has %d levels", t.maxN, r.Filter, levels))
		}
		return nil
	}
	fr := fwdRule{filter: r.Filter}
	if r.Topic != "" {
		t, reason := parseTemplate(r.Topic)
		if reason != "" {
			return fwdRule{}, rerr("topic", r.Topic, reason)
		}
		if err := checkLevels("topic", t); err != nil {
			return fwdRule{}, err
		}
		lits := t.literals()
		for j := 0; j < len(lits); j++ {
			if !isKafkaChar(lits[j]) {
				return fwdRule{}, rerr("topic", r.Topic, fmt.Sprintf("byte %q is not allowed in a Kafka topic name (only [a-zA-Z0-9._-])", lits[j]))
			}
		}
		if t.fixed {
			if reason := kafkaTopicReason(t.lit); reason != "" {
				return fwdRule{}, rerr("topic", r.Topic, reason)
			}
			if reason := reservedReason(t.lit); reason != "" {
				return fwdRule{}, rerr("topic", r.Topic, reason)
			}
			norm := KafkaMetricName(t.lit)
			if j, ok := m.fixedNames[norm]; ok && m.fwd[j].topic.lit != t.lit {
				return fwdRule{}, rerr("topic", r.Topic, fmt.Sprintf(
					"collides with forward rule %d's topic %q: Kafka treats '.' and '_' alike in metric names", j, m.fwd[j].topic.lit))
			}
			if _, ok := m.fixedNames[norm]; !ok {
				m.fixedNames[norm] = i
			}
		}
		fr.topic = t
	}
	if r.Key != "" {
		t, reason := parseTemplate(r.Key)
		if reason != "" {
			return fwdRule{}, rerr("key", r.Key, reason)
		}
		if err := checkLevels("key", t); err != nil {
			return fwdRule{}, err
		}
		fr.key = t
		if t.fixed {
			fr.keyBytes = []byte(t.lit)
		}
	}
	keys := make([]string, 0, len(r.Headers))
	for k := range r.Headers {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	fr.hdrsFixed = true
	for _, k := range keys {
		field := "headers[" + k + "]"
		switch {
		case k == "":
			return fwdRule{}, rerr(field, k, "empty header name")
		case IsReservedHeader(k):
			return fwdRule{}, rerr(field, k, `header names starting with "mqtt." or "ferry." are reserved`)
		}
		t, reason := parseTemplate(r.Headers[k])
		if reason != "" {
			return fwdRule{}, rerr(field, r.Headers[k], reason)
		}
		if err := checkLevels(field, t); err != nil {
			return fwdRule{}, err
		}
		fr.headers = append(fr.headers, headerTmpl{key: k, val: t})
		m.ruleHdrs[k] = struct{}{}
		if t.fixed {
			fr.fixedHdrs = append(fr.fixedHdrs, Header{Key: k, Value: []byte(t.lit)})
		} else {
			fr.hdrsFixed = false
		}
	}
	if !fr.hdrsFixed {
		fr.fixedHdrs = nil
	}
	fr.fixedHdrs = slices.Clip(fr.fixedHdrs)
	fr.keyBytes = slices.Clip(fr.keyBytes)
	if fr.topic != nil && fr.topic.fixed && fr.key != nil && fr.key.fixed && fr.hdrsFixed {
		fr.fixed = true
		fr.route = Route{Topic: fr.topic.lit, Key: fr.keyBytes, Headers: fr.fixedHdrs, Rule: i}
	}
	var prev int32
	var dup bool
	if hasWildcard(r.Filter) {
		prev, dup = m.trie.insert(r.Filter, int32(i))
	} else if j, ok := m.exact[r.Filter]; ok {
		prev, dup = j, true
	} else {
		m.exact[r.Filter] = int32(i)
	}
	if dup {
		return fwdRule{}, rerr("filter", r.Filter, fmt.Sprintf("duplicates the filter of forward rule %d", prev))
	}
	return fr, nil
}

func (m *Map) addReverse(i int, r ReverseRule) error {
	rerr := func(field, text, reason string) error {
		return &RuleError{Kind: "reverse", Index: i, Field: field, Text: text, Reason: reason}
	}
	rr := revRule{qos: DefaultReverseQoS, retain: r.Retain}
	if r.QoS != nil {
		if *r.QoS > 2 {
			return rerr("qos", fmt.Sprint(*r.QoS), "QoS must be 0, 1 or 2")
		}
		rr.qos, rr.setQoS = *r.QoS, true
	}
	isRegex := len(r.Kafka) >= 2 && r.Kafka[0] == '/' && r.Kafka[len(r.Kafka)-1] == '/'
	if isRegex {
		re, err := regexp.Compile("^(?:" + r.Kafka[1:len(r.Kafka)-1] + ")$")
		if err != nil {
			return rerr("kafka", r.Kafka, err.Error())
		}
		rr.re = re
	} else {
		if reason := kafkaTopicReason(r.Kafka); reason != "" {
			return rerr("kafka", r.Kafka, reason+" (write /regex/ for a pattern)")
		}
		if j, ok := m.revExact[r.Kafka]; ok {
			return rerr("kafka", r.Kafka, fmt.Sprintf("duplicates reverse rule %d", j))
		}
	}
	if r.MQTT != "" {
		t, reason := parseTemplate(r.MQTT)
		if reason != "" {
			return rerr("mqtt", r.MQTT, reason)
		}
		groups := 0
		if rr.re != nil {
			groups = rr.re.NumSubexp()
		}
		if t.maxN > groups {
			return rerr("mqtt", r.MQTT, fmt.Sprintf("uses {%d} but the kafka pattern has %d capture groups", t.maxN, groups))
		}
		lits := t.literals()
		if strings.ContainsAny(lits, "+#\x00") || !mqttString(lits) {
			return rerr("mqtt", r.MQTT, "wildcards, U+0000 and invalid UTF-8 are not allowed in an MQTT topic")
		}
		if t.fixed {
			if reason := topicNameReason(t.lit); reason != "" {
				return rerr("mqtt", r.MQTT, reason)
			}
		}
		rr.mqtt, rr.groups = t, t.maxN > 0
	}
	m.rev = append(m.rev, rr)
	if isRegex {
		m.revRegex = append(m.revRegex, i)
	} else {
		m.revExact[r.Kafka] = i
	}
	return nil
}

// Excluded reports whether mqttTopic matches an exclude filter.
func (m *Map) Excluded(mqttTopic string) bool {
	if _, ok := m.exclExact[mqttTopic]; ok {
		return true
	}
	return m.exclTrie.match(mqttTopic, 0, true) >= 0
}

// Match returns the index of the forward rule that routes mqttTopic, or DefaultRule when no
// rule matches; ok is false when the topic is excluded. It applies the precedence in the
// package doc, costs O(levels) whatever the number of rules, and does not allocate. It does
// not validate the topic (Forward does).
func (m *Map) Match(mqttTopic string) (rule int, ok bool) {
	if m.Excluded(mqttTopic) {
		return DefaultRule, false
	}
	if i, ok := m.exact[mqttTopic]; ok {
		return int(i), true
	}
	return int(m.trie.match(mqttTopic, 0, true)), true
}

// Forward maps an MQTT topic to its Kafka route. Errors: ErrExcluded (match with errors.Is)
// for excluded topics; *TopicError for invalid topics and topics whose route is not a valid
// Kafka name. For rules with a fixed topic, key and headers it returns a pre-built Route and
// does not allocate.
func (m *Map) Forward(mqttTopic string) (Route, error) {
	if reason := topicNameReason(mqttTopic); reason != "" {
		return Route{}, &TopicError{Topic: mqttTopic, Reason: reason}
	}
	i, ok := m.Match(mqttTopic)
	if !ok {
		return Route{}, ErrExcluded
	}
	if i == DefaultRule {
		name, err := m.defaultName(mqttTopic)
		if err != nil {
			return Route{}, err
		}
		return Route{Topic: name, Key: []byte(mqttTopic), Rule: DefaultRule}, nil
	}
	r := &m.fwd[i]
	if r.fixed {
		return r.route, nil
	}
	return m.render(i, r, mqttTopic)
}

// defaultName applies the default rule and refuses names that would share a Kafka topic
// (exactly or by metric name) with a rule's fixed topic.
func (m *Map) defaultName(t string) (string, error) {
	name, err := encode(t)
	if err != nil {
		return "", err
	}
	if j, ok := m.fixedNames[name]; ok {
		return "", &TopicError{Topic: t, Reason: fmt.Sprintf(
			"default rule gives %q, which would share a Kafka topic with forward rule %d (%q)", name, j, m.fwd[j].topic.lit)}
	}
	return name, nil
}

func (m *Map) render(i int, r *fwdRule, t string) (Route, error) {
	rt := Route{Rule: i}
	res := forwardResolver{topic: t}
	fail := func(field, raw, reason string) (Route, error) {
		return Route{}, &TopicError{Topic: t, Reason: fmt.Sprintf("forward rule %d %s %q: %s", i, field, raw, reason)}
	}
	switch {
	case r.topic == nil:
		name, err := m.defaultName(t)
		if err != nil {
			return Route{}, err
		}
		rt.Topic = name
	case r.topic.fixed:
		rt.Topic = r.topic.lit
	default:
		b, reason := r.topic.expand(make([]byte, 0, 64), res)
		if reason != "" {
			return fail("topic", r.topic.raw, reason)
		}
		name := string(b)
		if reason := kafkaTopicReason(name); reason != "" {
			return fail("topic", r.topic.raw, fmt.Sprintf("gives %q: %s", name, reason))
		}
		if reason := reservedReason(name); reason != "" {
			return fail("topic", r.topic.raw, fmt.Sprintf("gives %q: %s", name, reason))
		}
		rt.Topic = name
	}
	switch {
	case r.key == nil:
		rt.Key = []byte(t)
	case r.key.fixed:
		rt.Key = r.keyBytes
	default:
		b, reason := r.key.expand(nil, res)
		if reason != "" {
			return fail("key", r.key.raw, reason)
		}
		rt.Key = b
	}
	if r.hdrsFixed {
		rt.Headers = r.fixedHdrs
	} else {
		rt.Headers = make([]Header, 0, len(r.headers))
		for _, h := range r.headers {
			b, reason := h.val.expand(nil, res)
			if reason != "" {
				return fail("headers["+h.key+"]", h.val.raw, reason)
			}
			rt.Headers = append(rt.Headers, Header{Key: h.key, Value: b})
		}
	}
	return rt, nil
}

// Reverse maps a Kafka topic (and the record's headers) to an MQTT delivery. The MQTT topic
// is the HeaderMQTTTopic header when present and a valid topic name, else the matching
// reverse rule's template, else DecodeTopic. QoS and retain come from the matching rule
// (default 0, false). Errors: *TopicError when no valid MQTT topic results; ErrExcluded
// when the MQTT topic matches an exclude filter.
func (m *Map) Reverse(kafkaTopic string, headers []Header) (Delivery, error) {
	var rule *revRule
	var groups []string
	if i, ok := m.revExact[kafkaTopic]; ok {
		rule = &m.rev[i]
	} else {
		for _, i := range m.revRegex {
			r := &m.rev[i]
			if r.groups {
				if g := r.re.FindStringSubmatch(kafkaTopic); g != nil {
					rule, groups = r, g
					break
				}
			} else if r.re.MatchString(kafkaTopic) {
				rule = r
				break
			}
		}
	}
	d := Delivery{QoS: DefaultReverseQoS}
	if rule != nil {
		d.QoS, d.Retain, d.RuleQoS = rule.qos, rule.retain, rule.setQoS
	}
	switch t, ok := headerTopic(headers); {
	case ok:
		d.Topic = t
	case rule == nil || rule.mqtt == nil:
		t, err := DecodeTopic(kafkaTopic)
		if err != nil {
			var te *TopicError
			if errors.As(err, &te) {
				return Delivery{}, &TopicError{Topic: kafkaTopic, Reason: te.Reason +
					` (not a default-rule name: add a reverse rule, e.g. mqtt: "{topic}")`}
			}
			return Delivery{}, err
		}
		d.Topic = t
	case rule.mqtt.fixed:
		d.Topic = rule.mqtt.lit
	default:
		b, reason := rule.mqtt.expand(nil, reverseResolver{kafka: kafkaTopic, groups: groups})
		if reason == "" {
			reason = topicNameReason(string(b))
		}
		if reason != "" {
			return Delivery{}, &TopicError{Topic: kafkaTopic, Reason: fmt.Sprintf("reverse template %q: %s", rule.mqtt.raw, reason)}
		}
		d.Topic = string(b)
	}
	if m.Excluded(d.Topic) {
		return Delivery{}, ErrExcluded
	}
	return d, nil
}

// headerTopic returns the first HeaderMQTTTopic header if it is a valid MQTT topic name.
func headerTopic(headers []Header) (string, bool) {
	for _, h := range headers {
		if h.Key == HeaderMQTTTopic {
			t := string(h.Value)
			return t, topicNameReason(t) == ""
		}
	}
	return "", false
}
