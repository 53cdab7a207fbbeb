package bridge

import (
	"bufio"
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// rawConnect writes connect on a new connection and reports what the
// server answered before closing or within 5 s: the CONNACK's body (nil:
// none), and whether the server closed the connection. The connection is
// returned open when it was accepted.
func rawConnect(t *testing.T, addr string, connect packets.Packet) (connack []byte, closed bool, c *lightClient) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c = &lightClient{conn: conn, r: bufio.NewReaderSize(conn, 256)}
	connect.FixedHeader.Type = packets.Connect
	var b bytes.Buffer
	if err := connect.ConnectEncode(&b); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	typ, body, err := c.read()
	if err != nil {
		return nil, !isTimeout(err), c
	}
	if typ>>4 != packets.Connack {
		t.Fatalf("first packet from the server: type %d, want CONNACK", typ>>4)
	}
	if len(body) >= 2 && body[1] != 0 { // refused: the server must close
		_, _, err := c.read()
		return body, err != nil && !isTimeout(err), c
	}
	_ = conn.SetDeadline(time.Time{})
	return body, false, c
}

// willConnect is a CONNECT of MQTT version v (4: 3.1.1, 5) with a Will.
func willConnect(v byte, id, topic string, payload []byte) packets.Packet {
	return packets.Packet{ProtocolVersion: v, Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30,
		ClientIdentifier: id, WillFlag: true, WillTopic: topic, WillPayload: payload, WillQos: 1}}
}

// TestEdgesZeroLengthWillPayload (issue 53 item 4): a CONNECT whose Will
// Payload is zero length is accepted, and its Will (an empty message) is
// published when the connection is lost. 3.1.1 3.1.3.4: "The Will Message
// defines the Application Message ... This field consists of a two byte
// length followed by the payload"; a zero length is a length; MQTT 5
// 3.1.3.4 alike. It was refused (3.1.1 CONNACK 3, 5: 0x82).
func TestEdgesZeroLengthWillPayload(t *testing.T) {
	edgesZeroLengthWillPayload(t, startBridge(t, testConfig("")).MQTTAddr())
}

func edgesZeroLengthWillPayload(t *testing.T, addr string) {
	for _, v := range []byte{4, 5} {
		topic := "edges/emptywill/" + randHex(4)
		sub := dialClean(t, addr, v)
		subscribeRaw(t, sub, v, topic, 1)
		ack, closed, c := rawConnect(t, addr, willConnect(v, "emptywill-"+randHex(3), topic, nil))
		if len(ack) < 2 || ack[1] != 0 || closed {
			t.Fatalf("v%d CONNECT with a zero-length Will Payload: CONNACK %x, closed %v; want accepted", v, ack, closed)
		}
		c.close() // no DISCONNECT: the Will is published
		if got := sub.nextOf(t, v, packets.Publish, 10*time.Second); got.TopicName != topic || len(got.Payload) != 0 {
			t.Fatalf("v%d: got %q on %s, want the empty Will on %s", v, got.Payload, got.TopicName, topic)
		}
	}
}

// TestEdgesEmptyWillTopicV311 (issue 53 item 5): a 3.1.1 CONNECT with the
// Will Flag set and a zero-length Will Topic does not conform (a Topic
// Name is at least one character [MQTT-4.7.3-1], and the Will Topic is
// one [MQTT-3.1.3-10]): "If it does not conform, the Server MUST close the
// Network Connection without sending a CONNACK" [MQTT-3.1.4-1]. It got
// CONNACK 3 first. (MQTT 5 may send a CONNACK 0x80 or above first, and
// does: 0x82.)
func TestEdgesEmptyWillTopicV311(t *testing.T) {
	edgesEmptyWillTopicV311(t, startBridge(t, testConfig("")).MQTTAddr())
}

func edgesEmptyWillTopicV311(t *testing.T, addr string) {
	ack, closed, _ := rawConnect(t, addr, willConnect(4, "emptytopic-"+randHex(3), "", []byte("w")))
	if ack != nil || !closed {
		t.Fatalf("3.1.1 CONNECT with an empty Will Topic: CONNACK %x, closed %v; want the close without a CONNACK", ack, closed)
	}
	ack, closed, _ = rawConnect(t, addr, willConnect(5, "emptytopic5-"+randHex(3), "", []byte("w")))
	if len(ack) < 2 || ack[1] != 0x82 || !closed {
		t.Fatalf("MQTT 5 CONNECT with an empty Will Topic: CONNACK %x, closed %v; want CONNACK 0x82 and the close", ack, closed)
	}
}

// TestEdgesMQTT31SessionPresentReserved (issue 53 item 15): MQTT 3.1
// (protocol name MQIsdp, level 3) has no Session Present: the first byte
// of its CONNACK's variable header is reserved, zero (MQTT 3.1 CONNACK:
// "Reserved values. Not used."). A second connection of a CleanSession 0
// client got the bit set.
func TestEdgesMQTT31SessionPresentReserved(t *testing.T) {
	edgesMQTT31SessionPresentReserved(t, startBridge(t, testConfig("")).MQTTAddr())
}

func edgesMQTT31SessionPresentReserved(t *testing.T, addr string) {
	id := "mqtt31-" + randHex(3)
	connect := packets.Packet{ProtocolVersion: 3, Connect: packets.ConnectParams{ProtocolName: []byte("MQIsdp"), Keepalive: 30, ClientIdentifier: id}}
	for i := range 2 {
		ack, closed, c := rawConnect(t, addr, connect)
		if len(ack) != 2 || ack[1] != 0 || closed {
			t.Fatalf("MQTT 3.1 CONNECT %d: CONNACK %x closed %v, want accepted", i+1, ack, closed)
		}
		if ack[0] != 0 {
			t.Fatalf("MQTT 3.1 CONNECT %d (CleanSession 0): CONNACK's first byte %#x, want 0 (reserved in 3.1)", i+1, ack[0])
		}
		c.close()
	}
}

// TestEdgesUnsupportedProtocolLevelV311 (issue 53 item 16): a CONNECT of
// a protocol level the server does not support gets the 3.1.1 CONNACK
// return code 0x01: "The Server MUST respond to the CONNECT Packet with a
// CONNACK return code 0x01 (unacceptable protocol level) and then
// disconnect the Client if the Protocol Level is not supported by the
// Server" [MQTT-3.1.2-2]. It got 0x82 (3.1.1 has no such code), 3 from
// Ferry's compat layer.
func TestEdgesUnsupportedProtocolLevelV311(t *testing.T) {
	edgesUnsupportedProtocolLevelV311(t, startBridge(t, testConfig("")).MQTTAddr())
}

func edgesUnsupportedProtocolLevelV311(t *testing.T, addr string) {
	for _, level := range []byte{3, 6} { // "MQTT" is levels 4 and 5; 3 is "MQIsdp"'s
		ack, closed, _ := rawConnect(t, addr, packets.Packet{ProtocolVersion: level,
			Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30, ClientIdentifier: "level-" + randHex(3)}})
		if len(ack) != 2 || ack[1] != 0x01 || !closed {
			t.Fatalf("CONNECT \"MQTT\" level %d: CONNACK %x closed %v; want the 3.1.1 CONNACK 0x01 and the close", level, ack, closed)
		}
	}
}

// TestEdgesUnknownAuthenticationMethod (issue 53 item 14): an MQTT 5
// CONNECT naming an Authentication Method the server does not support (it
// supports none: no enhanced authentication) is refused: "If the Server
// does not support the Authentication Method supplied by the Client, it
// MAY send a CONNACK with a Reason Code of 0x8C (Bad authentication
// method) or 0x87 (Not Authorized) ... and MUST close the Network
// Connection" [MQTT-4.12.0-1]. It was accepted with CONNACK 0x00.
func TestEdgesUnknownAuthenticationMethod(t *testing.T) {
	edgesUnknownAuthenticationMethod(t, startBridge(t, testConfig("")).MQTTAddr())
}

func edgesUnknownAuthenticationMethod(t *testing.T, addr string) {
	ack, closed, _ := rawConnect(t, addr, packets.Packet{ProtocolVersion: 5,
		Connect:    packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30, ClientIdentifier: "authm-" + randHex(3)},
		Properties: packets.Properties{AuthenticationMethod: "SCRAM-SHA-1", AuthenticationData: []byte("client-first")}})
	if len(ack) < 2 || ack[1] != 0x8C || !closed {
		t.Fatalf("CONNECT with Authentication Method SCRAM-SHA-1: CONNACK %x, closed %v; want CONNACK 0x8C and the close", ack, closed)
	}
}
