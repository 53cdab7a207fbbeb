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

