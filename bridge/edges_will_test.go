package bridge

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
)

// TestEdgesDisconnectWithWillMessage (issue 53 item 3): an MQTT 5 client
// that ends its connection with DISCONNECT reason 0x04 "Disconnect with
// Will Message" has its Will published: "The Client wishes to disconnect
// but requires that the Server also publishes its Will Message" (3.14.2.1);
// a normal DISCONNECT (0x00) deletes it [MQTT-3.14.4-3].
func TestEdgesDisconnectWithWillMessage(t *testing.T) {
	edgesDisconnectWithWillMessage(t, startBridge(t, testConfig(kafkatest.Brokers(t))).MQTTAddr())
}

func edgesDisconnectWithWillMessage(t *testing.T, addr string) {
	for _, expiry := range []uint32{0, 300} {
		t.Run(fmt.Sprintf("session-expiry-%d", expiry), func(t *testing.T) { disconnectWithWill(t, addr, expiry) })
	}
}

func disconnectWithWill(t *testing.T, addr string, expiry uint32) {
	topic := "edges/will/" + randHex(4)
	sub := dialLight5(t, addr, "will-sub-"+randHex(3), true, packets.Properties{})
	subscribeRaw(t, sub, 5, topic, 1)
	for _, c := range []struct {
		reason byte
		will   string
	}{{0x00, "normal"}, {0x04, "with-will"}} {
		w, err := dialLightConnect(&net.Dialer{Timeout: 5 * time.Second}, addr, packets.Packet{
			FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 5,
			Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30, ClientIdentifier: "will-" + randHex(3),
				WillFlag: true, WillTopic: topic, WillPayload: []byte(c.will), WillQos: 1},
			Properties: packets.Properties{SessionExpiryInterval: expiry, SessionExpiryIntervalFlag: expiry > 0}})
		if err != nil {
			t.Fatal(err)
		}
		w.send(t, 5, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Disconnect}, ReasonCode: c.reason})
		w.close()
	}
	got := sub.nextOf(t, 5, packets.Publish, 10*time.Second)
	if string(got.Payload) != "with-will" {
		t.Fatalf("subscriber got %q, want the Will of the DISCONNECT 0x04 (with-will), and not the one of the normal DISCONNECT", got.Payload)
	}
}
