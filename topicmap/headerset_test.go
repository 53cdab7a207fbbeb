package topicmap

import (
	"slices"
	"strings"
	"testing"
)

func TestParseHeaderSet(t *testing.T) {
	for _, tt := range []struct {
		names []string
		want  HeaderSet
	}{
		{nil, DefaultHeaders},
		{[]string{"default"}, DefaultHeaders},
		{[]string{"all"}, AllHeaders},
		{[]string{"default", "ferry.seq"}, AllHeaders},
		{[]string{"mqtt.qos", "mqtt.retain", "mqtt.expiry", "mqtt.client_id", "ferry.origin", "ferry.seq"}, RequiredHeaders | bitSeq},
	} {
		got, err := ParseHeaderSet(tt.names)
		if err != nil || got != tt.want {
			t.Errorf("ParseHeaderSet(%q) = %v, %v; want %v", tt.names, got, err, tt.want)
		}
	}
	if _, err := ParseHeaderSet([]string{"default", "mqtt.Topic", "x"}); err == nil ||
		!strings.Contains(err.Error(), `unknown header "mqtt.Topic", "x"`) || !strings.Contains(err.Error(), "ferry.seq") {
		t.Fatalf("unknown names: err = %v", err)
	}
	want := []string{"mqtt.topic", "mqtt.qos", "mqtt.client_id", "ferry.origin", "mqtt.packet_id", "mqtt.retain", "mqtt.expiry"}
	if got := DefaultHeaders.Names(); !slices.Equal(got, want) {
		t.Fatalf("DefaultHeaders = %q, want %q", got, want)
	}
	if AllHeaders.Len() != 8 || !AllHeaders.Has(HeaderSeq) || DefaultHeaders.Has(HeaderSeq) || DefaultHeaders.Has("x") {
		t.Fatalf("AllHeaders = %v", AllHeaders)
	}
}

func TestCheckHeaders(t *testing.T) {
	if err := DefaultConfig().CheckHeaders(DefaultHeaders); err != nil {
		t.Fatalf("default set refused: %v", err)
	}
	if err := DefaultConfig().CheckHeaders(AllHeaders); err != nil {
		t.Fatalf("all refused: %v", err)
	}
	// Without mqtt.topic: fine while every Kafka topic decodes to its MQTT topic.
	plain := Config{Forward: []ForwardRule{{Filter: "a/#", Key: "{2}"}}, Reverse: []ReverseRule{{Kafka: "x", QoS: QoS(0)}}}
	if err := plain.CheckHeaders(DefaultHeaders &^ bitTopic); err != nil {
		t.Fatalf("no mqtt.topic under default-rule names refused: %v", err)
	}
	for _, tt := range []struct {
		cfg  Config
		set  HeaderSet
		want []string
	}{
		{DefaultConfig(), DefaultHeaders &^ bitOrigin, []string{"ferry.origin is required: loop prevention"}},
		{DefaultConfig(), DefaultHeaders &^ bitQoS, []string{"mqtt.qos is required"}},
		{DefaultConfig(), DefaultHeaders &^ bitRetain, []string{"mqtt.retain is required"}},
		{DefaultConfig(), DefaultHeaders &^ bitExpiry, []string{"mqtt.expiry is required"}},
		{DefaultConfig(), DefaultHeaders &^ bitClientID, []string{"mqtt.client_id is required: session replay applies MQTT 5 No Local"}},
		{DefaultConfig(), DefaultHeaders &^ bitPacketID, []string{"mqtt.packet_id or ferry.seq is required"}},
		{Config{Forward: []ForwardRule{{Filter: "a/#", Topic: "a"}}}, DefaultHeaders &^ bitTopic,
			[]string{`mqtt.topic is required: forward rule 0 sets topic "a"`}},
		{Config{Reverse: []ReverseRule{{Kafka: "/.*/", MQTT: "in/{topic}"}}}, AllHeaders &^ bitTopic,
			[]string{`mqtt.topic is required: reverse rule 0 sets mqtt "in/{topic}"`}},
		{DefaultConfig(), 0, []string{"mqtt.qos", "mqtt.retain", "mqtt.expiry", "mqtt.client_id", "ferry.origin", "mqtt.packet_id or ferry.seq"}},
	} {
		err := tt.cfg.CheckHeaders(tt.set)
		if err == nil {
			t.Errorf("CheckHeaders(%v) = nil, want %q", tt.set, tt.want)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("CheckHeaders(%v) = %v, want it to say %q", tt.set, err, w)
			}
		}
	}
}

// TestAppendStandard: a set is exactly what is written, in the documented
// order, and ParseStandard reads back what was written.
func TestAppendStandard(t *testing.T) {
	std := Standard{Topic: "a/b", QoS: 2, Retain: true, ClientID: "c1", PacketID: 65535, Seq: 1 << 63, Expiry: 1<<32 - 1}
	for _, set := range []HeaderSet{DefaultHeaders, AllHeaders, RequiredHeaders | bitSeq, 0} {
		b := NewHeaderBuilder(set, "ferry-1")
		hs := AppendStandard(b, []Header{{"x", nil}}, std)
		if b.Count(std) != len(hs)-1 {
			t.Errorf("set %v: Count = %d, wrote %d", set, b.Count(std), len(hs)-1)
		}
		var keys []string
		for _, h := range hs[1:] {
			keys = append(keys, h.Key)
		}
		if !slices.Equal(keys, set.Names()) {
			t.Errorf("set %v wrote %q", set, keys)
		}
		got, ok := ParseStandard(hs)
		if !ok || got.Origin != "ferry-1" && set&bitOrigin != 0 || got.Seq != std.Seq && set&bitSeq != 0 ||
			got.Topic != std.Topic && set&bitTopic != 0 || got.Expiry != std.Expiry || got.PacketID != std.PacketID && set&bitPacketID != 0 {
			if set != 0 {
				t.Errorf("set %v: ParseStandard = %+v, %v", set, got, ok)
			}
		}
	}
	// Absent values are omitted: QoS 0, no retain, no expiry, no packet id.
	hs := AppendStandard(NewHeaderBuilder(AllHeaders, "o"), []Header(nil), Standard{Topic: "t", ClientID: "c", Seq: 1})
	if n := NewHeaderBuilder(AllHeaders, "o").Count(Standard{Topic: "t", ClientID: "c", Seq: 1}); n != len(hs) {
		t.Errorf("Count = %d, wrote %d", n, len(hs))
	}
	var keys []string
	for _, h := range hs {
		keys = append(keys, h.Key+"="+string(h.Value))
	}
	if want := []string{"mqtt.topic=t", "mqtt.qos=0", "mqtt.client_id=c", "ferry.origin=o", "ferry.seq=1"}; !slices.Equal(keys, want) {
		t.Fatalf("got %q, want %q", keys, want)
	}
	// One value's room never reaches into the next.
	hs = AppendStandard(NewHeaderBuilder(AllHeaders, "o"), []Header(nil), std)
	hs[0].Value = append(hs[0].Value, 'X')
	if got, _ := ParseStandard(hs[1:]); got.ClientID != "c1" {
		t.Fatalf("appending to the topic value changed the client id: %q", got.ClientID)
	}
}

func TestAppendStandardAllocs(t *testing.T) {
	b := NewHeaderBuilder(AllHeaders, "ferry-1")
	std := Standard{Topic: "sensors/dev42/temp", QoS: 1, ClientID: "c1", PacketID: 7, Seq: 42, Expiry: 60}
	dst := make([]Header, 0, 8)
	if n := testing.AllocsPerRun(100, func() { _ = AppendStandard(b, dst[:0], std) }); n != 1 {
		t.Fatalf("AppendStandard: %v allocations, want 1 (the record's own values)", n)
	}
}

// ParseStandard copies only the string fields: a replay parses the headers
// of every record it reads, and the numbers (QoS, packet id, sequence,
// expiry, retain) cost no allocation.
func TestParseStandardAllocs(t *testing.T) {
	b := NewHeaderBuilder(AllHeaders, "ferry-1")
	hs := AppendStandard(b, []Header(nil), Standard{Topic: "sensors/dev42/temp", QoS: 1, Retain: true, ClientID: "c1", PacketID: 7, Seq: 42, Expiry: 60})
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseStandard(hs) }); n != 3 {
		t.Fatalf("ParseStandard: %v allocations, want 3 (topic, client id, origin)", n)
	}
}

// AppendStandardBuf writes what AppendStandard writes; with the topic and
// client id given as bytes and room in buf for the rest it allocates
// nothing, uses the given bytes as they are, and never writes past buf's
// capacity (a value that does not fit is allocated).
func TestAppendStandardBuf(t *testing.T) {
	b := NewHeaderBuilder(AllHeaders, "ferry-1")
	std := Standard{Topic: "sensors/dev42/temp", QoS: 1, Retain: true, ClientID: "c1", PacketID: 7, Seq: 42, Expiry: 60}
	sb := StandardBytes{Topic: []byte(std.Topic), ClientID: []byte(std.ClientID)}
	want := AppendStandard(b, []Header(nil), std)
	for _, tc := range []struct {
		name string
		buf  []byte
		sb   StandardBytes
	}{{"bytes and room", make([]byte, 0, 40), sb}, {"room only", make([]byte, 0, 80), StandardBytes{}}, {"no room", make([]byte, 0, 3), sb}, {"nil", nil, StandardBytes{}}} {
		got := AppendStandardBuf(b, []Header(nil), tc.buf, std, tc.sb)
		if len(got) != len(want) {
			t.Fatalf("%s: %d headers, want %d", tc.name, len(got), len(want))
		}
		for i := range got {
			if got[i].Key != want[i].Key || string(got[i].Value) != string(want[i].Value) {
				t.Fatalf("%s: header %d %s=%q, want %s=%q", tc.name, i, got[i].Key, got[i].Value, want[i].Key, want[i].Value)
			}
		}
		if tc.sb.Topic != nil && &got[0].Value[0] != &tc.sb.Topic[0] {
			t.Errorf("%s: the topic bytes were copied", tc.name)
		}
	}
	buf := make([]byte, 0, 40)
	dst := make([]Header, 0, 8)
	if n := testing.AllocsPerRun(100, func() { _ = AppendStandardBuf(b, dst[:0], buf, std, sb) }); n != 0 {
		t.Fatalf("AppendStandardBuf with room: %v allocations, want 0", n)
	}
}
