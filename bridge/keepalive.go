package bridge

import (
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// keepaliveHook enforces mqtt.max_keepalive. mochi takes the client's keep
// alive from CONNECT (ParseConnect), then calls OnConnect, then sets the
// connection's deadline to 1.5 x cl.State.Keepalive before every read, and
// announces cl.State.Keepalive in CONNACK's Server Keep Alive when
// cl.State.ServerKeepalive is set (server.go SendConnack). So lowering
// cl.State.Keepalive here is all it takes:
//   - a v5 client asking for more than the limit, or for 0 (no keep alive),
//     is given the limit in Server Keep Alive [MQTT-3.2.2-21] and must use it;
//   - a 3.1.1 client (no such property) asking for more, or for 0, is held to
//     the limit silently: it is disconnected after 1.5 x the limit without a
//     packet (a client that pings at its own longer interval is cut off).
type keepaliveHook struct {
	mqtt.HookBase
	max uint16 // seconds, > 0
}

// newKeepaliveHook returns nil when there is no limit.
func newKeepaliveHook(limit time.Duration) *keepaliveHook {
	if limit <= 0 {
		return nil
	}
	return &keepaliveHook{max: uint16(limit / time.Second)}
}

func (h *keepaliveHook) ID() string { return "ferry-keepalive" }

func (h *keepaliveHook) Provides(b byte) bool { return b == mqtt.OnConnect }

func (h *keepaliveHook) OnConnect(cl *mqtt.Client, pk packets.Packet) error {
	ka := pk.Connect.Keepalive
	if ka != 0 && ka <= h.max {
		return nil
	}
	cl.State.Keepalive = h.max
	cl.State.ServerKeepalive = cl.Properties.ProtocolVersion == 5
	return nil
}
