package bridge

import (
	"net"
	"strings"
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

// instancePair is two instances sharing their state topics on the real
// Kafka: startA starts the first and returns its MQTT address, offline
// reports whether the first has recorded session id offline, startB
// starts the second (a freshly started instance that knows the session
// from Kafka alone).
type instancePair struct {
	startA, startB func() string
	offline        func(id string) bool
}

// inProcessPair is an instancePair of in-process bridges (edgesPair).
func inProcessPair(t *testing.T) instancePair {
	ca, cb := edgesPair(t)
	var a *Bridge
	return instancePair{
		startA:  func() string { a = startBridge(t, ca); return a.MQTTAddr() },
		offline: func(id string) bool { return sessionOffline(a, id) },
		startB:  func() string { return startBridge(t, cb).MQTTAddr() },
	}
}

// binaryPair is an instancePair of cmd/bridge processes; offline reads the
// session's record in the sessions topic.
func binaryPair(t *testing.T) instancePair {
	brokers := kafkatest.Brokers(t)
	var sessions string
	for _, kv := range stateEnv(t) {
		if v, ok := strings.CutPrefix(kv, "FERRY_STATE_SESSIONS_TOPIC="); ok {
			sessions = v
		}
	}
	start := func(name string) func() string {
		return func() string { return startFerry(t, name, "", "FERRY_KAFKA_BROKERS="+brokers).MQTTAddr }
	}
	return instancePair{
		startA: start("ferry-a"),
		offline: func(id string) bool {
			rec := sessionIn(t, readTable(t, strings.Split(brokers, ","), sessions), id)
			return rec != nil && !rec.Connected
		},
		startB: start("ferry-b"),
	}
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

// TestEdgesBinary runs the raw-packet checks of issue 53 that need one
// instance against the cmd/bridge binary (FERRY_TEST_BRIDGE_BIN, or built
// here) on the real Kafka, as a third-party suite meets it; each check's
// own test runs it against an in-process bridge.
func TestEdgesBinary(t *testing.T) {
	p := startFerry(t, "ferry-edges", "", "FERRY_KAFKA_BROKERS="+kafkatest.Brokers(t))
	for _, c := range []struct {
		name  string
		check func(*testing.T, string)
	}{
		{"3-disconnect-with-will", edgesDisconnectWithWillMessage},
		{"4-zero-length-will-payload", edgesZeroLengthWillPayload},
		{"5-empty-will-topic-v311", edgesEmptyWillTopicV311},
		{"6-topic-bounds", edgesTopicBounds},
		{"7-unknown-topic-alias", edgesUnknownTopicAlias},
		{"8-retained-hash-parent", edgesRetainedHashMatchesParent},
		{"9-sys-publish-answered", edgesSysPublishAnswered},
		{"10-held-back-qos2", edgesHeldBackQoS2StaysInFlight},
		{"13-invalid-utf8-topic", edgesInvalidUTF8TopicTold},
		{"14-unknown-auth-method", edgesUnknownAuthenticationMethod},
		{"15-mqtt31-session-present", edgesMQTT31SessionPresentReserved},
		{"16-unsupported-level", edgesUnsupportedProtocolLevelV311},
	} {
		t.Run(c.name, func(t *testing.T) { c.check(t, p.MQTTAddr) })
	}
}

// TestEdgesBinaryResume runs the resume checks of issue 53 (items 11 and
// 12) against two cmd/bridge processes on the real Kafka: the session
// leaves the first and resumes on the second, freshly started.
func TestEdgesBinaryResume(t *testing.T) {
	t.Run("11-qos2-resend", func(t *testing.T) { edgesQoS2ResendOnResume(t, binaryPair) })
	t.Run("12-subscriptions-live-at-connack", func(t *testing.T) { edgesResumedSubscriptionsLiveAtConnack(t, binaryPair) })
}
