package topicmap

import (
	"errors"
	"strings"
	"testing"
)

func TestEncodeDecode(t *testing.T) {
	tests := []struct {
		name, mqtt, kafka string
	}{
		{"reference forward", "/tacos/pub/lf", "_tacos_pub_lf"},
		{"reference reverse", "/tacos/sub/le", "_tacos_sub_le"},
		{"plain", "a/b", "a_b"},
		{"underscore escaped", "a_b", "a-5fb"},
		{"dot escaped", "a.b", "a-2eb"},
		{"hyphen doubled", "dev-001/temp", "dev--001_temp"},
		{"leading slash", "/a", "_a"},
		{"trailing slash", "a/", "a_"},
		{"slash alone", "/", "_"},
		{"empty level", "a//b", "a__b"},
		{"trailing empty levels", "a//", "a__"},
		{"dollar topic", "$SYS/broker/uptime", "-24SYS_broker_uptime"},
		{"space", "my room", "my-20room"},
		{"unicode", "café/☕", "caf-c3-a9_-e2-98-95"},
		{"upper and digits", "ABC/x9", "ABC_x9"},
		{"hyphen then escape", "-.", "---2e"},
		{"control char", "a\x01", "a-01"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := EncodeTopic(tt.mqtt)
			if err != nil || got != tt.kafka {
				t.Fatalf("EncodeTopic(%q) = %q, %v; want %q", tt.mqtt, got, err, tt.kafka)
			}
			if err := ValidKafkaTopic(got); err != nil {
				t.Fatalf("encoded name invalid: %v", err)
			}
			back, err := DecodeTopic(tt.kafka)
			if err != nil || back != tt.mqtt {
				t.Fatalf("DecodeTopic(%q) = %q, %v; want %q", tt.kafka, back, err, tt.mqtt)
			}
		})
	}
}

func TestEncodeRejects(t *testing.T) {
	tests := []struct {
		name, mqtt, reason string
	}{
		{"empty", "", "empty"},
		{"plus", "a/+/b", "wildcard"},
		{"hash alone", "#", "wildcard"},
		{"hash", "a/#", "wildcard"},
		{"nul", "a\x00b", "U+0000"},
		{"invalid utf8", "a\xffb", "UTF-8"},
		{"surrogate", "a\xed\xa0\x80", "UTF-8"},
		{"internal prefix", "//consumer/offsets", "__"},
		{"ferry state prefix", "/ferry/sessions", "_ferry_"},
		{"250 chars", strings.Repeat("a", 250), "250 chars"},
		{"escape pushes over", strings.Repeat("a", 247) + ".", "250 chars"},
		{"too long for mqtt", strings.Repeat("a", 65536), "65535"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := EncodeTopic(tt.mqtt)
			var te *TopicError
			if !errors.As(err, &te) || !errors.Is(err, ErrUnmappable) {
				t.Fatalf("EncodeTopic = %q, %v; want *TopicError", got, err)
			}
			if te.Topic != tt.mqtt || !strings.Contains(te.Reason, tt.reason) {
				t.Fatalf("error %v: want topic %q and reason containing %q", err, tt.mqtt, tt.reason)
			}
		})
	}
}

func TestEncodeLengthBoundary(t *testing.T) {
	for _, s := range []string{strings.Repeat("a", 249), strings.Repeat("b", 246) + "_", strings.Repeat("-", 124) + "x"} {
		k, err := EncodeTopic(s)
		if err != nil || len(k) != 249 {
			t.Fatalf("EncodeTopic(len %d) = len %d, %v; want 249 chars", len(s), len(k), err)
		}
	}
	if _, err := EncodeTopic(strings.Repeat("-", 125)); err == nil {
		t.Fatal("125 hyphens encode to 250 chars: want error")
	}
}

func TestDecodeRejects(t *testing.T) {
	tests := []struct {
		name, kafka, reason string
	}{
		{"empty", "", "empty"},
		{"dot", "orders.v1", "'.'"},
		{"dot only", ".", `"."`},
		{"bad char", "a b", "not allowed"},
		{"too long", strings.Repeat("a", 250), "250 chars"},
		{"internal", "__consumer_offsets", "internal"},
		{"ferry state", "_ferry_retained", "Ferry's own state"},
		{"truncated escape", "a-2", "truncated"},
		{"lone hyphen", "a-", "truncated"},
		{"uppercase hex", "a-2E", "bad escape"},
		{"non hex", "a-zz", "bad escape"},
		{"escaped letter", "-41", "non-canonical"},
		{"escaped slash", "a-2fb", "non-canonical"},
		{"escaped hyphen", "a-2d", "non-canonical"},
		{"plus", "a-2b", "wildcard"},
		{"hash", "a-23", "wildcard"},
		{"nul", "a-00", "U+0000"},
		{"broken utf8", "a-ff", "UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeTopic(tt.kafka)
			var te *TopicError
			if !errors.As(err, &te) || !strings.Contains(te.Reason, tt.reason) {
				t.Fatalf("DecodeTopic(%q) = %q, %v; want *TopicError containing %q", tt.kafka, got, err, tt.reason)
			}
		})
	}
}

func TestValidKafkaTopic(t *testing.T) {
	good := []string{"a", "..a", "a.b_c-D9", strings.Repeat("x", 249), "__consumer_offsets"}
	for _, s := range good {
		if err := ValidKafkaTopic(s); err != nil {
			t.Errorf("ValidKafkaTopic(%q) = %v", s, err)
		}
	}
	bad := []string{"", ".", "..", strings.Repeat("x", 250), "a/b", "a b", "é", "a+b"}
	for _, s := range bad {
		if err := ValidKafkaTopic(s); err == nil {
			t.Errorf("ValidKafkaTopic(%q) = nil, want error", s)
		}
	}
}

// TestCollisionSafety: the pairs that a naive '/'->'_' rule would merge stay apart, also in
// Kafka's metric names.
func TestCollisionSafety(t *testing.T) {
	pairs := [][2]string{{"a/b", "a_b"}, {"a/b", "a.b"}, {"a_b", "a.b"}, {"a/5f", "a_"}, {"a-b", "a/b"}, {"a--b", "a-/b"}}
	for _, p := range pairs {
		x, err1 := EncodeTopic(p[0])
		y, err2 := EncodeTopic(p[1])
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if x == y || KafkaMetricName(x) == KafkaMetricName(y) {
			t.Errorf("%q and %q both map to %q / %q", p[0], p[1], x, y)
		}
	}
}
