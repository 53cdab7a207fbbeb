package mochipatch

import (
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// The CONNECT corners of FERRY.md "edges 4, 5, 15, 16", on mochi alone.

func willConnectPacket(id, topic string, payload []byte) packets.Packet {
	return packets.Packet{Connect: packets.ConnectParams{Clean: true, Keepalive: 30, ClientIdentifier: id,
		WillFlag: true, WillTopic: topic, WillPayload: payload, WillQos: 1}}
}

// TestZeroLengthWillPayloadAccepted (edges 4): a Will with a zero-length
// payload is a Will (3.1.1 and MQTT 5 3.1.3.4); upstream refused the
// CONNECT (ErrProtocolViolationWillFlagNoPayload, 3.1.1 CONNACK 0x82).
func TestZeroLengthWillPayloadAccepted(t *testing.T) {
	s := edgeServer(t)
	for _, v := range []byte{4, 5} {
		c := dialRaw(t, s, v, willConnectPacket("ew"+string(rune('0'+v)), "w/t", nil))
		if ack := c.next(time.Second); ack.FixedHeader.Type != packets.Connack || ack.ReasonCode != 0 {
			t.Fatalf("v%d: CONNACK %#x, want 0", v, ack.ReasonCode)
		}
	}
}

// TestEmptyWillTopicV311ClosedWithoutConnack (edges 5): a 3.1.1 CONNECT
// with a zero-length Will Topic does not conform: "the Server MUST close
// the Network Connection without sending a CONNACK" [MQTT-3.1.4-1];
// upstream sent CONNACK 0x82 first. MQTT 5 still gets its CONNACK 0x82.
func TestEmptyWillTopicV311ClosedWithoutConnack(t *testing.T) {
	s := edgeServer(t)
	c := dialRaw(t, s, 4, willConnectPacket("et4", "", []byte("w")))
	if closed, got := c.closed(time.Second); !closed || len(got) != 0 {
		t.Fatalf("3.1.1: closed %v after %d packets (%v), want the close and nothing", closed, len(got), got)
	}
	c = dialRaw(t, s, 5, willConnectPacket("et5", "", []byte("w")))
	if ack := c.next(time.Second); ack.FixedHeader.Type != packets.Connack || ack.ReasonCode != 0x82 {
		t.Fatalf("MQTT 5: type %d reason %#x, want CONNACK 0x82", ack.FixedHeader.Type, ack.ReasonCode)
	}
}

// TestMQTT31ConnackHasNoSessionPresent (edges 15): the first byte of an
// MQTT 3.1 (MQIsdp, level 3) CONNACK is reserved; upstream set its
// Session Present bit for a CleanSession 0 client resuming.
func TestMQTT31ConnackHasNoSessionPresent(t *testing.T) {
	s := edgeServer(t)
	for i := range 2 {
		c := dialRaw(t, s, 3, packets.Packet{Connect: packets.ConnectParams{Keepalive: 30, ClientIdentifier: "v31"}})
		ack := c.next(time.Second)
		if ack.FixedHeader.Type != packets.Connack || ack.ReasonCode != 0 || ack.SessionPresent {
			t.Fatalf("connect %d: type %d reason %#x session present %v, want accepted with the reserved byte 0",
				i+1, ack.FixedHeader.Type, ack.ReasonCode, ack.SessionPresent)
		}
		c.conn.Close()
		deadline := time.Now().Add(time.Second)
		for cl, ok := s.Clients.Get("v31"); ok && !cl.Closed(); cl, ok = s.Clients.Get("v31") {
			if time.Now().After(deadline) {
				t.Fatal("the first connection not gone")
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// TestUnsupportedProtocolLevelGets0x01 (edges 16): "MQTT" at a level the
// server does not support gets the 3.1.1 CONNACK return code 0x01
// [MQTT-3.1.2-2]; upstream sent 0x82, which 3.1.1 does not define.
func TestUnsupportedProtocolLevelGets0x01(t *testing.T) {
	s := edgeServer(t)
	for _, level := range []byte{3, 6} {
		c := dialRaw(t, s, level, packets.Packet{Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30,
			ClientIdentifier: "lvl"}})
		c.v = 4 // the answer is a 3.1.1 CONNACK
		if ack := c.next(time.Second); ack.FixedHeader.Type != packets.Connack || ack.ReasonCode != 0x01 {
			t.Fatalf("level %d: type %d reason %#x, want CONNACK 0x01", level, ack.FixedHeader.Type, ack.ReasonCode)
		}
	}
}

// TestUnknownAuthenticationMethodRefused (edges 14): with no hook doing
// enhanced authentication (OnAuthPacket), a CONNECT naming an
// Authentication Method gets CONNACK 0x8C Bad authentication method and
// the close [MQTT-4.12.0-1]; upstream accepted it.
func TestUnknownAuthenticationMethodRefused(t *testing.T) {
	s := edgeServer(t)
	c := dialRaw(t, s, 5, packets.Packet{Connect: packets.ConnectParams{Clean: true, Keepalive: 30, ClientIdentifier: "am"},
		Properties: packets.Properties{AuthenticationMethod: "SCRAM-SHA-1"}})
	if ack := c.next(time.Second); ack.FixedHeader.Type != packets.Connack || ack.ReasonCode != 0x8C {
		t.Fatalf("type %d reason %#x, want CONNACK 0x8C", ack.FixedHeader.Type, ack.ReasonCode)
	}
	if closed, _ := c.closed(time.Second); !closed {
		t.Fatal("connection left open")
	}
}
