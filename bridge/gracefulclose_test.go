package bridge

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestV5DisconnectReadNotReset: a client disconnected with 0x93 reads the
// DISCONNECT, then the end of the stream, never a reset, although it was
// still writing: it sends max_inflight + 1 QoS 2 publishes at once and
// answers each PUBREC with PUBREL, as Paho's test client does. Closing a
// socket whose receive buffer holds the client's unread PUBRELs sends RST,
// which can destroy the DISCONNECT before the client reads it; Ferry
// half-closes and reads on for a while instead.
func TestV5DisconnectReadNotReset(t *testing.T) {
	cfg := testConfig("") // embedded Kafka
	cfg.MQTT.MaxInflight = 4
	b := startBridge(t, cfg)
	topic := uniqueTopic("rst")
	const rounds = 30
	for r := range rounds {
		c := dialLight5(t, b.MQTTAddr(), "rst-"+randHex(3), true, packets.Properties{})
		for id := uint16(1); id <= uint16(cfg.MQTT.MaxInflight+1); id++ {
			c.queue(t, 5, publishPacket(topic, 2, id, "q2"))
		}
		if err := c.flush(); err != nil {
			t.Fatal(err)
		}
		code := -1
		for code < 0 {
			pk, _, err := c.tryNext(5, 10*time.Second)
			if err != nil {
				t.Fatalf("round %d: reading before the DISCONNECT: %v", r, err)
			}
			switch pk.FixedHeader.Type {
			case packets.Pubrec:
				c.queue(t, 5, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrel}, PacketID: pk.PacketID})
				_ = c.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
				if err := c.flush(); err != nil {
					t.Fatalf("round %d: PUBREL %d: %v", r, pk.PacketID, err)
				}
			case packets.Disconnect:
				code = int(pk.ReasonCode)
			default:
				t.Fatalf("round %d: unexpected packet type %d", r, pk.FixedHeader.Type)
			}
		}
		if code != int(packets.ErrReceiveMaximum.Code) {
			t.Fatalf("round %d: DISCONNECT reason %#x, want 0x93", r, code)
		}
		if _, _, err := c.tryNext(5, 10*time.Second); !errors.Is(err, io.EOF) {
			t.Fatalf("round %d: after the DISCONNECT: %v, want EOF", r, err)
		}
		c.close()
	}
}
