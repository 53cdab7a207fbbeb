package topicmap

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func mustNew(t *testing.T, cfg Config) *Map {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

func TestMatchFilter(t *testing.T) {
	tests := []struct {
		filter, topic string
		want          bool
	}{
		{"#", "a", true},
		{"#", "/", true},
		{"#", "a/b/c", true},
		{"#", "$SYS/x", false},
		{"+", "a", true},
		{"+", "", true},
		{"+", "/", false},
		{"+/+", "/", true},
		{"+/+", "/a", true},
		{"/+", "/a", true},
		{"+", "$SYS", false},
		{"+/x", "$SYS/x", false},
		{"$SYS/#", "$SYS/broker/load", true},
		{"$SYS/#", "$SYS", true},
		{"a/#", "a", true},
		{"a/#", "a/", true},
		{"a/#", "ab", false},
		{"a/+", "a", false},
		{"a/+", "a/", true},
		{"a/+", "a/b/c", false},
		{"a//b", "a//b", true},
		{"a/+/b", "a//b", true},
		{"+/+/+", "a/b/c", true},
		{"+/b/+", "a/b/c", true},
		{"a/+/+", "a/b", false},
		{"a/b", "a/b/", false},
		{"a/b/", "a/b/", true},
	}
	m := mustNew(t, Config{})
	for _, tt := range tests {
		if got := MatchFilter(tt.filter, tt.topic); got != tt.want {
			t.Errorf("MatchFilter(%q, %q) = %v, want %v", tt.filter, tt.topic, got, tt.want)
		}
		// The trie agrees with MatchFilter for a single rule.
		if tt.topic == "" {
			continue
		}
		m1 := mustNew(t, Config{Forward: []ForwardRule{{Filter: tt.filter, Topic: "t"}}})
		got, ok := m1.Match(tt.topic)
		if !ok || (got == 0) != tt.want {
			t.Errorf("Match(%q) with filter %q = %d, %v; want match %v", tt.topic, tt.filter, got, ok, tt.want)
		}
	}
	_ = m
}

// TestPlusAtEveryLevel: a '+' anywhere in a 4-level filter matches, and loses to literals.
func TestPlusAtEveryLevel(t *testing.T) {
	topic := "a/b/c/d"
	levels := strings.Split(topic, "/")
	for i := range levels {
		f := slices.Clone(levels)
		f[i] = "+"
		filter := strings.Join(f, "/")
		m := mustNew(t, Config{Forward: []ForwardRule{
			{Filter: filter, Topic: "plus"},
			{Filter: "+/+/+/+", Topic: "all-plus"},
			{Filter: "#", Topic: "hash"},
		}})
		r, err := m.Forward(topic)
		if err != nil || r.Topic != "plus" || r.Rule != 0 {
			t.Errorf("filter %q: Forward(%q) = %+v, %v; want rule 0", filter, topic, r, err)
		}
	}
}

func TestPrecedence(t *testing.T) {
	cfg := Config{
		Exclude: []string{"$SYS/#", "secret/#", "private"},
		Forward: []ForwardRule{
			{Filter: "#", Topic: "r0-hash"},
			{Filter: "a/#", Topic: "r1-a-hash"},
			{Filter: "a/+", Topic: "r2-a-plus"},
			{Filter: "a/+/#", Topic: "r3-a-plus-hash"},
			{Filter: "a/b/#", Topic: "r4-a-b-hash"},
			{Filter: "a/b", Topic: "r5-exact"},
			{Filter: "+/b/c", Topic: "r6-plus-b-c"},
			{Filter: "a/+/c", Topic: "r7-a-plus-c"},
			{Filter: "x/+/+", Topic: "r8"},
			{Filter: "x/y/#", Topic: "r9"},
			{Filter: "secret/x", Topic: "r10"},
			{Filter: "$aws/+", Topic: "r11"},
		},
	}
	m := mustNew(t, cfg)
	tests := []struct {
		topic string
		rule  int
		ok    bool
	}{
		{"a/b", 5, true},        // exact beats everything
		{"a/c", 2, true},        // a/+ beats a/+/# (filter end beats '#') and a/#
		{"a", 1, true},          // a/# matches its parent; beats #
		{"a/b/c", 4, true},      // a/b/# beats a/+/c: literal b beats '+' at level 2
		{"a/b/d", 4, true},      // a/b/# beats a/+/#
		{"a/z/c", 7, true},      // a/+/c beats a/+/# and +/b/c does not match
		{"q/b/c", 6, true},      // only +/b/c and #
		{"x/y/z", 9, true},      // x/y/# beats x/+/+ (literal y beats '+')
		{"x/q/z", 8, true},      // x/+/+
		{"zzz", 0, true},        // #
		{"secret/x", -1, false}, // exclude beats an exact rule
		{"secret", -1, false},   // secret/# matches its parent
		{"private", -1, false},  // exact exclude
		{"private/x", 0, true},  // not excluded
		{"$SYS/uptime", -1, false},
		{"$aws/thing", 11, true}, // '#' does not match $-topics, literal $aws does
		{"$other", -1, true},     // default rule: '#' does not match $-topics
	}
	for _, tt := range tests {
		rule, ok := m.Match(tt.topic)
		if rule != tt.rule || ok != tt.ok {
			t.Errorf("Match(%q) = %d, %v; want %d, %v", tt.topic, rule, ok, tt.rule, tt.ok)
		}
	}
	// a/b/c: candidates a/# (1), a/+/# (3), a/b/# (4), +/b/c (6), a/+/c (7), # (0).
	// Level 1: literal a beats '+' (drops 6). Level 2: literal b (4) beats '+' (3, 7).
	rule, _ := m.Match("a/b/c")
	if rule != 4 {
		t.Errorf("Match(a/b/c) = %d, want 4 (level 2 literal beats '+')", rule)
	}
}

func TestForwardTemplates(t *testing.T) {
	m := mustNew(t, Config{Forward: []ForwardRule{
		{Filter: "sensors/+/temperature", Topic: "sensor-temps", Key: "{2}", Headers: map[string]string{"site": "hq", "device": "{2}"}},
		{Filter: "factory/#"},
		{Filter: "fleet/+/gps", Topic: "fleet-gps", Key: "fixed", Headers: map[string]string{"kind": "gps"}},
		{Filter: "raw/+/#", Topic: "raw.{2}.{3}", Key: "{topic}"},
		{Filter: "esc/#", Topic: "esc.{default}"},
		{Filter: "brace", Topic: "b", Key: "{{{topic}}}"},
	}})
	r, err := m.Forward("sensors/dev7/temperature")
	if err != nil {
		t.Fatal(err)
	}
	want := Route{Topic: "sensor-temps", Key: []byte("dev7"), Rule: 0,
		Headers: []Header{{Key: "device", Value: []byte("dev7")}, {Key: "site", Value: []byte("hq")}}}
	if !routeEqual(r, want) {
		t.Errorf("got %+v, want %+v", r, want)
	}
	r, err = m.Forward("factory/line 1/temp")
	if err != nil || r.Topic != "factory_line-201_temp" || string(r.Key) != "factory/line 1/temp" || r.Rule != 1 {
		t.Errorf("factory: %+v, %v", r, err)
	}
	r, err = m.Forward("fleet/truck-9/gps")
	if err != nil || r.Topic != "fleet-gps" || string(r.Key) != "fixed" || len(r.Headers) != 1 || r.Rule != 2 {
		t.Errorf("fleet: %+v, %v", r, err)
	}
	r, err = m.Forward("raw/a/b/c")
	if err != nil || r.Topic != "raw.a.b" || string(r.Key) != "raw/a/b/c" {
		t.Errorf("raw: %+v, %v", r, err)
	}
	r, err = m.Forward("esc/x y")
	if err != nil || r.Topic != "esc.esc_x-20y" {
		t.Errorf("esc: %+v, %v", r, err)
	}
	r, err = m.Forward("brace")
	if err != nil || string(r.Key) != "{brace}" {
		t.Errorf("brace: %+v, %v", r, err)
	}
	// Substituted text that is not a valid Kafka name, and missing levels, are TopicErrors.
	for _, topic := range []string{"raw/a b/c", "raw/a", "raw/é/x", "sensors/a b/temperature"} {
		r, err := m.Forward(topic)
		var te *TopicError
		if topic == "sensors/a b/temperature" {
			// fixed topic: only the key uses the level, keys may hold anything
			if err != nil || string(r.Key) != "a b" {
				t.Errorf("Forward(%q) = %+v, %v", topic, r, err)
			}
			continue
		}
		if !errors.As(err, &te) || te.Topic != topic {
			t.Errorf("Forward(%q) = %+v, %v; want *TopicError", topic, r, err)
		}
	}
	// Default-rule names never silently join a rule's fixed topic.
	m2 := mustNew(t, Config{Forward: []ForwardRule{{Filter: "sensors/+/t", Topic: "sensor.temps"}}})
	if _, err := m2.Forward("sensor/temps"); !errors.Is(err, ErrUnmappable) || !strings.Contains(err.Error(), "forward rule 0") {
		t.Errorf("collision with rule topic: %v", err)
	}
}

func routeEqual(a, b Route) bool {
	return a.Topic == b.Topic && string(a.Key) == string(b.Key) && a.Rule == b.Rule &&
		slices.EqualFunc(a.Headers, b.Headers, func(x, y Header) bool { return x.Key == y.Key && string(x.Value) == string(y.Value) })
}

func TestForwardErrors(t *testing.T) {
	m := mustNew(t, DefaultConfig())
	for _, topic := range []string{"", "a/+", "#", "a\x00", "\xff", strings.Repeat("x", 250), "//x"} {
		if _, err := m.Forward(topic); !errors.Is(err, ErrUnmappable) {
			t.Errorf("Forward(%q) = %v, want ErrUnmappable", topic, err)
		}
	}
	if _, err := m.Forward("$SYS/broker/clients"); !errors.Is(err, ErrExcluded) {
		t.Errorf("$SYS: %v", err)
	}
	r, err := m.Forward("/tacos/pub/lf")
	if err != nil || r.Topic != "_tacos_pub_lf" || r.Rule != DefaultRule || string(r.Key) != "/tacos/pub/lf" {
		t.Errorf("default: %+v, %v", r, err)
	}
	r, err = m.Forward(strings.Repeat("y", 249))
	if err != nil || len(r.Topic) != 249 {
		t.Errorf("249 chars: %v", err)
	}
}

func TestRuleErrors(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		kind   string
		index  int
		field  string
		reason string
	}{
		{"bad filter", Config{Forward: []ForwardRule{{Filter: "a"}, {Filter: "a/b#"}}}, "forward", 1, "filter", "whole level"},
		{"hash not last", Config{Forward: []ForwardRule{{Filter: "#/a"}}}, "forward", 0, "filter", "last level"},
		{"empty filter", Config{Forward: []ForwardRule{{}}}, "forward", 0, "filter", "empty"},
		{"share", Config{Forward: []ForwardRule{{Filter: "$share/g/a"}}}, "forward", 0, "filter", "shared"},
		{"duplicate exact", Config{Forward: []ForwardRule{{Filter: "a/b"}, {Filter: "a/b", Topic: "x"}}}, "forward", 1, "filter", "rule 0"},
		{"duplicate wildcard", Config{Forward: []ForwardRule{{Filter: "a/+"}, {Filter: "a/#"}, {Filter: "a/#"}}}, "forward", 2, "filter", "rule 1"},
		{"bad topic char", Config{Forward: []ForwardRule{{Filter: "a", Topic: "a/b"}}}, "forward", 0, "topic", "not allowed"},
		{"topic too long", Config{Forward: []ForwardRule{{Filter: "a", Topic: strings.Repeat("t", 250)}}}, "forward", 0, "topic", "250"},
		{"topic dot", Config{Forward: []ForwardRule{{Filter: "a", Topic: ".."}}}, "forward", 0, "topic", `".."`},
		{"internal topic", Config{Forward: []ForwardRule{{Filter: "a", Topic: "__consumer_offsets"}}}, "forward", 0, "topic", "internal"},
		{"unclosed", Config{Forward: []ForwardRule{{Filter: "a", Topic: "t{1"}}}, "forward", 0, "topic", "unclosed"},
		{"unknown placeholder", Config{Forward: []ForwardRule{{Filter: "a", Key: "{x}"}}}, "forward", 0, "key", "unknown placeholder"},
		{"zero level", Config{Forward: []ForwardRule{{Filter: "a", Key: "{0}"}}}, "forward", 0, "key", "unknown placeholder"},
		{"stray brace", Config{Forward: []ForwardRule{{Filter: "a", Key: "x}"}}}, "forward", 0, "key", "unmatched"},
		{"level beyond filter", Config{Forward: []ForwardRule{{Filter: "a/+", Topic: "t-{3}"}}}, "forward", 0, "topic", "2 levels"},
		{"reserved header", Config{Forward: []ForwardRule{{Filter: "a", Headers: map[string]string{"ferry.origin": "x"}}}}, "forward", 0, "headers[ferry.origin]", "reserved"},
		{"metric collision", Config{Forward: []ForwardRule{{Filter: "a", Topic: "x.y"}, {Filter: "b", Topic: "x_y"}}}, "forward", 1, "topic", "metric"},
		{"bad exclude", Config{Exclude: []string{"$SYS/#", "a/#/b"}}, "exclude", 1, "filter", "last level"},
		{"bad regex", Config{Reverse: []ReverseRule{{Kafka: "/a(/"}}}, "reverse", 0, "kafka", "missing"},
		{"bad kafka name", Config{Reverse: []ReverseRule{{Kafka: "a b"}}}, "reverse", 0, "kafka", "regex"},
		{"dup reverse", Config{Reverse: []ReverseRule{{Kafka: "a"}, {Kafka: "a"}}}, "reverse", 1, "kafka", "rule 0"},
		{"qos", Config{Reverse: []ReverseRule{{Kafka: "a", QoS: QoS(3)}}}, "reverse", 0, "qos", "QoS"},
		{"group on exact", Config{Reverse: []ReverseRule{{Kafka: "a", MQTT: "x/{1}"}}}, "reverse", 0, "mqtt", "0 capture groups"},
		{"wildcard template", Config{Reverse: []ReverseRule{{Kafka: "a", MQTT: "x/#"}}}, "reverse", 0, "mqtt", "wildcards"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			var re *RuleError
			if !errors.As(err, &re) || !errors.Is(err, ErrInvalidRule) {
				t.Fatalf("New = %v, want *RuleError", err)
			}
			if re.Kind != tt.kind || re.Index != tt.index || re.Field != tt.field || !strings.Contains(re.Reason, tt.reason) {
				t.Fatalf("got %+v (%v), want %s rule %d field %s reason ~%q", re, err, tt.kind, tt.index, tt.field, tt.reason)
			}
		})
	}
}

func TestReverse(t *testing.T) {
	m := mustNew(t, Config{
		Exclude: []string{"$SYS/#"},
		Reverse: []ReverseRule{
			{Kafka: "orders.v1", MQTT: "shop/orders", QoS: QoS(1), Retain: true},
			{Kafka: `/telemetry\.([a-z]+)\.(.*)/`, MQTT: "tele/{1}/{2}", QoS: QoS(2)},
			{Kafka: "/raw-.*/", MQTT: "raw/{topic}"},
			{Kafka: "/.*/", MQTT: "{default}", QoS: QoS(1)},
		},
	})
	tests := []struct {
		kafka   string
		headers []Header
		want    Delivery
	}{
		{"orders.v1", nil, Delivery{"shop/orders", 1, true, true}},
		{"telemetry.fan.speed", nil, Delivery{"tele/fan/speed", 2, false, true}},
		{"raw-x.y", nil, Delivery{"raw/raw-x.y", DefaultReverseQoS, false, false}},
		{"_tacos_sub_le", nil, Delivery{"/tacos/sub/le", 1, false, true}},
		{"orders.v1", []Header{{HeaderMQTTTopic, []byte("from/header")}}, Delivery{"from/header", 1, true, true}},
		{"orders.v1", []Header{{HeaderMQTTTopic, []byte("bad/+")}}, Delivery{"shop/orders", 1, true, true}},
	}
	for _, tt := range tests {
		got, err := m.Reverse(tt.kafka, tt.headers)
		if err != nil || got != tt.want {
			t.Errorf("Reverse(%q) = %+v, %v; want %+v", tt.kafka, got, err, tt.want)
		}
	}
	if _, err := m.Reverse("x", []Header{{HeaderMQTTTopic, []byte("$SYS/x")}}); !errors.Is(err, ErrExcluded) {
		t.Errorf("excluded header topic: %v", err)
	}
	if _, err := m.Reverse("orders.v2", nil); !errors.Is(err, ErrUnmappable) {
		t.Errorf("{default} of an undecodable name: %v", err)
	}
	d := mustNew(t, DefaultConfig())
	got, err := d.Reverse("_tacos_sub_le", nil)
	if err != nil || got != (Delivery{Topic: "/tacos/sub/le", QoS: DefaultReverseQoS}) {
		t.Errorf("default reverse: %+v, %v", got, err)
	}
	if _, err := d.Reverse("orders.v1", nil); !errors.Is(err, ErrUnmappable) {
		t.Errorf("undecodable: %v", err)
	}
	// The delivery QoS of a record: a rule's, lowered by its mqtt.qos
	// header; without a rule's, the header's (the MQTT publisher's QoS).
	for _, tt := range []struct {
		d    Delivery
		std  Standard
		want byte
	}{
		{Delivery{QoS: DefaultReverseQoS}, Standard{}, DefaultReverseQoS},
		{Delivery{QoS: DefaultReverseQoS}, Standard{QoS: 2, HasQoS: true}, 2},
		{Delivery{QoS: DefaultReverseQoS}, Standard{QoS: 0, HasQoS: true}, 0},
		{Delivery{QoS: 1, RuleQoS: true}, Standard{QoS: 2, HasQoS: true}, 1},
		{Delivery{QoS: 2, RuleQoS: true}, Standard{QoS: 1, HasQoS: true}, 1},
		{Delivery{QoS: 2, RuleQoS: true}, Standard{}, 2},
	} {
		if got := tt.d.RecordQoS(tt.std); got != tt.want {
			t.Errorf("%+v.RecordQoS(%+v) = %d, want %d", tt.d, tt.std, got, tt.want)
		}
	}
}

// TestUserPropsRuleHeadersReserved: a user property named like a header any
// forward rule sets is dropped too (whichever rule routes the publish).
func TestUserPropsRuleHeadersReserved(t *testing.T) {
	m, err := New(Config{Forward: []ForwardRule{
		{Filter: "fleet/+", Topic: "fleet", Headers: map[string]string{"site": "hq"}},
		{Filter: "other/#", Topic: "other", Headers: map[string]string{"Region": "{1}"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	props := []UserProperty{{"site", "evil"}, {"Region", "x"}, {"region", "ok"}, {"ferry.seq", "1"}, {"unit", "C"}}
	hs, dropped := m.UserPropsToHeaders(nil, props)
	if dropped != 3 || len(hs) != 2 || hs[0].Key != "region" || hs[1].Key != "unit" {
		t.Fatalf("Map.UserPropsToHeaders = %+v, %d; want region and unit, 3 dropped", hs, dropped)
	}
	for key, want := range map[string]bool{"site": true, "Region": true, "mqtt.qos": true, "region": false, "unit": false} {
		if got := m.IsReservedHeader(key); got != want {
			t.Errorf("IsReservedHeader(%q) = %v, want %v", key, got, want)
		}
	}
}

func TestHeaders(t *testing.T) {
	props := []UserProperty{{"a", "1"}, {"ferry.origin", "spoof"}, {"a", "2"}, {"mqtt.topic", "x"}}
	hs, dropped := UserPropsToHeaders(nil, props)
	if dropped != 2 || len(hs) != 2 || hs[0].Key != "a" || string(hs[1].Value) != "2" {
		t.Fatalf("UserPropsToHeaders = %+v, %d", hs, dropped)
	}
	std := Standard{Topic: "a/b", QoS: 1, Retain: true, ClientID: "c1", PacketID: 7, Origin: "ferry-1", Seq: 42, Expiry: 60}
	all := AppendStandard(NewHeaderBuilder(AllHeaders, std.Origin), hs, std)
	back, dropped := HeadersToUserProps(nil, append(all, Header{"bin", []byte{0xff}}))
	if dropped != 1 || !slices.Equal(back, []UserProperty{{"a", "1"}, {"a", "2"}}) {
		t.Fatalf("HeadersToUserProps = %+v, %d", back, dropped)
	}
	got, ok := ParseStandard(all)
	std.HasQoS, std.HasRetain = true, true
	if !ok || got != std {
		t.Fatalf("ParseStandard = %+v, %v; want %+v", got, ok, std)
	}
	if s, ok := ParseStandard([]Header{{HeaderQoS, []byte("3")}}); ok || s.HasQoS {
		t.Fatal("qos 3 accepted")
	}
	// Only the first of each name counts, even when a later one differs.
	dup := []Header{{HeaderOrigin, []byte("a")}, {HeaderRetain, []byte("false")}, {HeaderQoS, []byte("0")},
		{HeaderOrigin, []byte("b")}, {HeaderRetain, []byte("true")}, {HeaderQoS, []byte("2")}}
	if s, _ := ParseStandard(dup); s.Origin != "a" || s.Retain || !s.HasRetain || s.QoS != 0 || !s.HasQoS {
		t.Fatalf("ParseStandard(duplicates) = %+v, want the first of each", s)
	}
}

func TestUnicodeAndLengthRules(t *testing.T) {
	m := mustNew(t, Config{Forward: []ForwardRule{
		{Filter: "café/+", Topic: "cafe", Key: "{2}"},
		{Filter: "long/+", Topic: "{2}"},
		{Filter: "☕/#"},
	}})
	r, err := m.Forward("café/crème")
	if err != nil || r.Topic != "cafe" || string(r.Key) != "crème" {
		t.Errorf("unicode filter: %+v, %v", r, err)
	}
	r, err = m.Forward("☕/x")
	if err != nil || r.Topic != "-e2-98-95_x" {
		t.Errorf("unicode default: %+v, %v", r, err)
	}
	if r, err := m.Forward("long/" + strings.Repeat("n", 249)); err != nil || len(r.Topic) != 249 {
		t.Errorf("249-char template result: %v", err)
	}
	if _, err := m.Forward("long/" + strings.Repeat("n", 250)); !errors.Is(err, ErrUnmappable) || !strings.Contains(err.Error(), "250") {
		t.Errorf("250-char template result: %v", err)
	}
	if _, err := m.Forward("long/__x"); !errors.Is(err, ErrUnmappable) {
		t.Errorf("internal template result: %v", err)
	}
	d := mustNew(t, DefaultConfig())
	if _, err := d.Reverse("sensor-temps", nil); err == nil || !strings.Contains(err.Error(), "add a reverse rule") {
		t.Errorf("reverse hint: %v", err)
	}
}
