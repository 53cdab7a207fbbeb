package bridge

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// deepTopic is a topic (and filter) of levels one-byte levels.
func deepTopic(levels int) string {
	return strings.TrimSuffix(strings.Repeat("l/", levels), "/")
}

// TestEdgesTopicBounds (issue 53 item 6): topic names and filters beyond
// mqtt.max_topic_levels (default 64) or mqtt.max_topic_length are refused
// with a reason code, at once, and consistently in SUBSCRIBE and PUBLISH:
// a SUBSCRIBE filter gets 0x8F "Topic Filter invalid: The Topic Filter is
// correctly formed but is not allowed for this Client" (MQTT 5 3.9.3;
// 3.1.1 3.9.3: 0x80 Failure), a QoS 1 PUBLISH 0x90 "Topic Name invalid"
// (3.4.2.1; 3.1.1 has no PUBACK code: the connection is closed). Before,
// a 128-level SUBSCRIBE got 0x00 and its topic was never delivered (its
// Kafka name is too long), and a SUBSCRIBE of a 65,535-level filter cost
// seconds of CPU (the topic index walked the filter from its start for
// each level) before its SUBACK. A 64-level topic is subscribed and
// delivered.
func TestEdgesTopicBounds(t *testing.T) {
	edgesTopicBounds(t, startBridge(t, testConfig("")).MQTTAddr())
}

func edgesTopicBounds(t *testing.T, addr string) {
	for _, v := range []byte{4, 5} {
		c := dialClean(t, addr, v)
		refused := byte(0x8F)
		if v == 4 {
			refused = 0x80
		}
		c.send(t, v, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe}, PacketID: 1,
			Filters: packets.Subscriptions{{Filter: deepTopic(128), Qos: 1}, {Filter: deepTopic(65), Qos: 1}, {Filter: deepTopic(64), Qos: 1}}})
		if ack := c.nextOf(t, v, packets.Suback, 10*time.Second); string(ack.ReasonCodes) != string([]byte{refused, refused, 1}) {
			t.Fatalf("v%d SUBACK of 128, 65 and 64 levels: %#x, want %#x %#x 0x01", v, ack.ReasonCodes, refused, refused)
		}
		start := time.Now()
		c.send(t, v, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe}, PacketID: 2,
			Filters: packets.Subscriptions{{Filter: strings.Repeat("/", 65534)}}})
		ack := c.nextOf(t, v, packets.Suback, 30*time.Second)
		if took := time.Since(start); len(ack.ReasonCodes) != 1 || ack.ReasonCodes[0] != refused || took > 2*time.Second {
			t.Fatalf("v%d SUBACK of a 65,535-level filter: %#x after %s, want %#x within 2s", v, ack.ReasonCodes, took, refused)
		}
		c.send(t, v, publishPacket(deepTopic(64), 1, 3, "in"))
		if got := c.nextOf(t, v, packets.Publish, 10*time.Second); string(got.Payload) != "in" {
			t.Fatalf("v%d 64-level topic: got %q", v, got.Payload)
		}
		c.send(t, v, publishPacket(deepTopic(65), 1, 4, "out"))
		if v == 5 {
			ack := c.nextOf(t, v, packets.Puback, 10*time.Second)
			if ack.PacketID == 3 { // the 64-level publish's
				ack = c.nextOf(t, v, packets.Puback, 10*time.Second)
			}
			if ack.PacketID != 4 || ack.ReasonCode != 0x90 {
				t.Fatalf("v5 QoS 1 publish to 65 levels: PUBACK id %d reason %#x, want id 4 0x90", ack.PacketID, ack.ReasonCode)
			}
			continue
		}
		for {
			pk, _, err := c.tryNext(v, 10*time.Second)
			if err != nil {
				if isTimeout(err) {
					t.Fatal("v4 QoS 1 publish to 65 levels: the connection stays open")
				}
				break // closed
			}
			if pk.FixedHeader.Type == packets.Puback && pk.PacketID == 4 {
				t.Fatal("v4 QoS 1 publish to 65 levels acknowledged")
			}
		}
	}
}

// dialClean connects a clean raw client of MQTT version v (4: 3.1.1, 5).
func dialClean(t testing.TB, addr string, v byte) *lightClient {
	t.Helper()
	if v == 5 {
		return dialLight5(t, addr, "edges-"+randHex(3), true, packets.Properties{})
	}
	c, err := dialLight(&net.Dialer{Timeout: 5 * time.Second}, addr, "edges-"+randHex(3), 4, 30)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.close)
	return c
}

// TestTopicBoundsConfig: mqtt.max_topic_levels and mqtt.max_topic_length
// default to 64 and 4096, come from the file, the environment
// (FERRY_MQTT_MAX_TOPIC_LEVELS) and reach mochi's capabilities.
func TestTopicBoundsConfig(t *testing.T) {
	cfg, err := loadWith(t, "")
	if err != nil || cfg.MQTT.MaxTopicLevels != 64 || cfg.MQTT.MaxTopicLength != 4096 {
		t.Fatalf("defaults: %d levels, %d bytes, err %v; want 64, 4096", cfg.MQTT.MaxTopicLevels, cfg.MQTT.MaxTopicLength, err)
	}
	t.Setenv("FERRY_MQTT_MAX_TOPIC_LEVELS", "8")
	cfg, err = loadWith(t, "mqtt:\n  max_topic_length: 100\n")
	if err != nil || cfg.MQTT.MaxTopicLevels != 8 || cfg.MQTT.MaxTopicLength != 100 {
		t.Fatalf("env and file: %d levels, %d bytes, err %v; want 8, 100", cfg.MQTT.MaxTopicLevels, cfg.MQTT.MaxTopicLength, err)
	}
	cfg.MQTT.Listen, cfg.HTTP.Listen = "127.0.0.1:0", ""
	b := &Bridge{cfg: cfg, log: testLogger(t)}
	if caps := b.mochiOptions().Capabilities; caps.MaximumTopicLevels != 8 || caps.MaximumTopicLength != 100 {
		t.Fatalf("mochi capabilities: %d levels, %d bytes; want 8, 100", caps.MaximumTopicLevels, caps.MaximumTopicLength)
	}
}
