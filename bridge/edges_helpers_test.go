package bridge

import (
	"net"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
)

// Helpers of the tests of issue 53 (MQTT at the edges, edges_*_test.go):
// raw packets against the real bridge, on top of lightClient.

// edgesPair is two bridge configs on the real Kafka sharing their state
// topics: a session that leaves one resumes on the other, a freshly
// started instance that knows it only from Kafka.
func edgesPair(t *testing.T) (Config, Config) {
	brokers := kafkatest.Brokers(t)
	a, b := testConfig(brokers), testConfig(brokers)
	tag := randHex(4)
	for _, c := range []*Config{&a, &b} {
		c.State.SessionsTopic, c.State.RetainedTopic, c.State.Partitions = "_ferry_sessions_e"+tag, "_ferry_retained_e"+tag, 1
	}
	return a, b
}

// dialPersistent connects a raw client of MQTT version v (4: 3.1.1, 5)
// whose session outlives the connection (Clean Session 0 / Clean Start 0
// with a Session Expiry of an hour).
func dialPersistent(t testing.TB, addr, id string, v byte) *lightClient {
	t.Helper()
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: v,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Keepalive: 30, ClientIdentifier: id}}
	if v == 5 {
		pk.Properties.SessionExpiryInterval, pk.Properties.SessionExpiryIntervalFlag = 3600, true
	}
	c, err := dialLightConnect(&net.Dialer{Timeout: 5 * time.Second}, addr, pk)
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	t.Cleanup(c.close)
	return c
}

// subscribeRaw subscribes c (version v) to filter at qos and fails unless
// the SUBACK grants it.
func subscribeRaw(t testing.TB, c *lightClient, v byte, filter string, qos byte) {
	t.Helper()
	c.send(t, v, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe}, PacketID: 77,
		Filters: packets.Subscriptions{{Filter: filter, Qos: qos}}})
	ack := c.nextOf(t, v, packets.Suback, 10*time.Second)
	if len(ack.ReasonCodes) != 1 || ack.ReasonCodes[0] != qos {
		t.Fatalf("SUBACK of %s at QoS %d: %v", filter, qos, ack.ReasonCodes)
	}
}

// publishQoS2Raw publishes payload to topic at QoS 2 from a fresh clean
// raw client of version v and completes the exchange (PUBREC, PUBREL,
// PUBCOMP).
func publishQoS2Raw(t testing.TB, addr, topic, payload string, v byte) {
	t.Helper()
	c, err := dialLight(&net.Dialer{Timeout: 5 * time.Second}, addr, "edges-pub-"+randHex(3), v, 30)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	c.send(t, v, publishPacket(topic, 2, 1, payload))
	if rec := c.nextOf(t, v, packets.Pubrec, 15*time.Second); rec.ReasonCode >= 0x80 {
		t.Fatalf("PUBREC of the publish to %s: reason %#x", topic, rec.ReasonCode)
	}
	c.send(t, v, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrel}, PacketID: 1})
	c.nextOf(t, v, packets.Pubcomp, 10*time.Second)
}

// nextOf reads packets until one of type typ (skipping PINGRESPs and
// others), within the timeout.
func (c *lightClient) nextOf(t testing.TB, v byte, typ byte, within time.Duration) packets.Packet {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("no packet of type %d within %s", typ, within)
		}
		pk, _, err := c.tryNext(v, left)
		if err != nil {
			t.Fatalf("waiting for a packet of type %d: %v", typ, err)
		}
		if pk.FixedHeader.Type == typ {
			return pk
		}
	}
}
