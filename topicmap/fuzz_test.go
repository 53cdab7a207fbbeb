package topicmap

import (
	"errors"
	"strings"
	"testing"
)

// FuzzRoundTrip checks that the default rule is a bijection: every accepted MQTT topic
// round-trips, distinct topics never share a Kafka topic (not even by Kafka metric name),
// and every Kafka name DecodeTopic accepts re-encodes to itself.
func FuzzRoundTrip(f *testing.F) {
	seeds := []string{"/tacos/pub/lf", "_tacos_sub_le", "a/b", "a_b", "a.b", "a//b", "/", "a/",
		"$SYS/x", "café/☕", "dev-001", "---2e", "a-5fb", strings.Repeat("z", 249), "a b\x01"}
	for i, s := range seeds {
		f.Add(s, seeds[(i+1)%len(seeds)])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ka, erra := EncodeTopic(a)
		kb, errb := EncodeTopic(b)
		for _, c := range []struct {
			topic, kafka string
			err          error
		}{{a, ka, erra}, {b, kb, errb}} {
			if c.err != nil {
				var te *TopicError
				if !errors.As(c.err, &te) {
					t.Fatalf("EncodeTopic(%q): untyped error %v", c.topic, c.err)
				}
				continue
			}
			if err := ValidKafkaTopic(c.kafka); err != nil || IsInternalKafkaTopic(c.kafka) || IsFerryTopic(c.kafka) || strings.Contains(c.kafka, ".") {
				t.Fatalf("EncodeTopic(%q) = %q: not a valid, non-internal, dot-free Kafka name (%v)", c.topic, c.kafka, err)
			}
			back, err := DecodeTopic(c.kafka)
			if err != nil || back != c.topic {
				t.Fatalf("DecodeTopic(EncodeTopic(%q)) = %q, %v", c.topic, back, err)
			}
		}
		if erra == nil && errb == nil && a != b && KafkaMetricName(ka) == KafkaMetricName(kb) {
			t.Fatalf("%q and %q collide: %q, %q", a, b, ka, kb)
		}
		// Decode side: any name that decodes must re-encode to itself.
		if topic, err := DecodeTopic(a); err == nil {
			k, err := EncodeTopic(topic)
			if err != nil || k != a {
				t.Fatalf("EncodeTopic(DecodeTopic(%q)) = %q, %v", a, k, err)
			}
		}
	})
}

// FuzzRules feeds arbitrary rules to New and arbitrary topics to the resulting Map: nothing
// may panic, errors must be typed, and every forwarded route must name a valid Kafka topic.
func FuzzRules(f *testing.F) {
	f.Add("sensors/+/temperature", "sensor-temps", "{2}", "{1}", "/a(.*)/", "x/{1}", "sensors/d/temperature")
	f.Add("factory/#", "", "", "", "orders", "", "factory/a b")
	f.Add("raw/+/#", "raw.{2}.{3}", "{topic}", "{default}", "/.*/", "{default}", "raw/a")
	f.Add("#", "{{x}}", "}", "{", "/(/", "{9}", "\xff")
	f.Fuzz(func(t *testing.T, filter, topicT, keyT, hdrT, kafka, mqttT, topic string) {
		m, err := New(Config{
			Exclude: []string{"$SYS/#"},
			Forward: []ForwardRule{{Filter: filter, Topic: topicT, Key: keyT, Headers: map[string]string{"h": hdrT}}},
			Reverse: []ReverseRule{{Kafka: kafka, MQTT: mqttT, QoS: QoS(1)}},
		})
		if err != nil {
			var re *RuleError
			if !errors.As(err, &re) {
				t.Fatalf("New: untyped error %v", err)
			}
			return
		}
		r, err := m.Forward(topic)
		if err == nil {
			if verr := ValidKafkaTopic(r.Topic); verr != nil || IsInternalKafkaTopic(r.Topic) || IsFerryTopic(r.Topic) {
				t.Fatalf("Forward(%q) = %q: %v", topic, r.Topic, verr)
			}
		} else if !errors.Is(err, ErrExcluded) && !errors.Is(err, ErrUnmappable) {
			t.Fatalf("Forward(%q): unexpected error %v", topic, err)
		}
		for _, k := range []string{kafka, topic, r.Topic} {
			d, err := m.Reverse(k, []Header{{Key: HeaderMQTTTopic, Value: []byte(topic)}})
			if err == nil {
				if verr := ValidTopicName(d.Topic); verr != nil {
					t.Fatalf("Reverse(%q) = %q: %v", k, d.Topic, verr)
				}
			} else if !errors.Is(err, ErrExcluded) && !errors.Is(err, ErrUnmappable) {
				t.Fatalf("Reverse(%q): unexpected error %v", k, err)
			}
			_, _ = m.Reverse(k, nil)
		}
	})
}

// FuzzMatch compares the trie matcher with the linear oracle. filters holds one filter per
// line; lines starting with '!' are exclude filters.
func FuzzMatch(f *testing.F) {
	f.Add("a/+\na/#\n#\n+/b\n!$SYS/#\na/b", "a/b")
	f.Add("+/+\n/+\n+\n#", "/x")
	f.Add("a/+/c\na/b/#\n+/b/c\n!x/#", "a/b/c")
	f.Add("$x/+\n+/y", "$x/y")
	f.Fuzz(func(t *testing.T, filters, topic string) {
		var fwd []ForwardRule
		var filt, excl []string
		seen := map[string]bool{}
		for i, line := range strings.Split(filters, "\n") {
			if i >= 32 {
				break
			}
			if strings.HasPrefix(line, "!") {
				if ValidFilter(line[1:]) == nil {
					excl = append(excl, line[1:])
				}
				continue
			}
			if ValidFilter(line) != nil || seen[line] {
				continue
			}
			seen[line] = true
			fwd = append(fwd, ForwardRule{Filter: line, Topic: "t"})
			filt = append(filt, line)
		}
		m, err := New(Config{Forward: fwd, Exclude: excl})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		if topic == "" {
			return
		}
		gotRule, gotOK := m.Match(topic)
		wantRule, wantOK := newLinear(excl, filt).match(topic)
		if gotRule != wantRule || gotOK != wantOK {
			t.Fatalf("Match(%q) = %d, %v; linear = %d, %v (filters %q, exclude %q)", topic, gotRule, gotOK, wantRule, wantOK, filt, excl)
		}
	})
}

// FuzzUserPropsToHeaders: whatever names a client sends, no header it
// supplies is reserved (standard or a rule's), every property is either
// kept in order or counted as dropped.
func FuzzUserPropsToHeaders(f *testing.F) {
	m, err := New(Config{Forward: []ForwardRule{{Filter: "a/+", Topic: "t", Headers: map[string]string{"site": "hq", "Dev": "{2}"}}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add("ferry.origin", "x", "site", "y", "unit", "C")
	f.Add("mqtt.topic", "", "Dev", "1", "dev", "2")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3 string) {
		props := []UserProperty{{k1, v1}, {k2, v2}, {k3, v3}}
		hs, dropped := m.UserPropsToHeaders(nil, props)
		if len(hs)+dropped != len(props) {
			t.Fatalf("%d kept + %d dropped != %d properties", len(hs), dropped, len(props))
		}
		i := 0
		for _, p := range props {
			if m.IsReservedHeader(p.Key) {
				continue
			}
			if hs[i].Key != p.Key || string(hs[i].Value) != p.Value {
				t.Fatalf("header %d = %q=%q, want %q=%q", i, hs[i].Key, hs[i].Value, p.Key, p.Value)
			}
			i++
		}
		for _, h := range hs {
			if IsReservedHeader(h.Key) || h.Key == "site" || h.Key == "Dev" {
				t.Fatalf("reserved header %q came from a client", h.Key)
			}
		}
	})
}
