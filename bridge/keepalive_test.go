package bridge

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	paholog "github.com/eclipse/paho.golang/paho/log"
	pahov3 "github.com/eclipse/paho.mqtt.golang"
)

// silentPinger never pings: the client stays quiet after CONNECT, so the
// server's keep alive deadline is what ends the connection. It records the
// keep alive the client library settled on (its own or Server Keep Alive).
type silentPinger struct{ keepalive atomic.Int32 }

func (p *silentPinger) Run(ctx context.Context, _ net.Conn, ka uint16) error {
	p.keepalive.Store(int32(ka))
	<-ctx.Done()
	return nil
}
func (p *silentPinger) PacketSent()             {}
func (p *silentPinger) PacketReceived()         {}
func (p *silentPinger) PingResp()               {}
func (p *silentPinger) SetDebug(paholog.Logger) {}

// TestMaxKeepaliveV5: MQTT 5 3.2.2.3.14: "If the Server sends a Server Keep
// Alive on the CONNACK packet, the Client MUST use this value instead of the
// Keep Alive value the Client sent on CONNECT" [MQTT-3.2.2-21]; 3.1.2.10:
// the server disconnects a client that sends nothing for one and a half
// times the Keep Alive [MQTT-3.1.2-22]. With mqtt.max_keepalive 2s, a client
// asking for 60s or for 0 is told 2 and cut off after 3s of silence; one
// asking for 1s gets no Server Keep Alive.
func TestMaxKeepaliveV5(t *testing.T) {
	cfg := testConfig("")
	cfg.MQTT.MaxKeepalive = 2 * time.Second
	b := startBridge(t, cfg)

	for _, tt := range []struct {
		ask  uint16
		want uint16 // 0: no Server Keep Alive property
	}{{60, 2}, {0, 2}, {1, 0}, {2, 0}} {
		id := "ka5-" + randHex(3)
		_, ca := dialV5(t, b.MQTTAddr(), paho.ClientConfig{ClientID: id, PingHandler: new(silentPinger)},
			&paho.Connect{ClientID: id, KeepAlive: tt.ask, CleanStart: true})
		if ca.ReasonCode != 0 {
			t.Fatalf("keep alive %d: CONNACK reason %#x", tt.ask, ca.ReasonCode)
		}
		ska := ca.Properties.ServerKeepAlive
		switch {
		case tt.want == 0 && ska != nil:
			t.Errorf("keep alive %d: Server Keep Alive %d, want none", tt.ask, *ska)
		case tt.want != 0 && (ska == nil || *ska != tt.want):
			t.Errorf("keep alive %d: Server Keep Alive %v, want %d", tt.ask, ska, tt.want)
		}
	}

	// Held to it: a silent client asking for 60s is disconnected after
	// about 1.5 x 2s, one using the default pinger (which follows Server
	// Keep Alive) stays connected.
	lost := make(chan time.Time, 1)
	p := new(silentPinger)
	start := time.Now()
	connectV5(t, b.MQTTAddr(), "ka5-silent-"+randHex(3), func(cc *paho.ClientConfig, cp *paho.Connect) {
		cp.KeepAlive = 60
		cc.PingHandler = p
		cc.OnClientError = func(error) {
			select {
			case lost <- time.Now():
			default:
			}
		}
	})
	var goodLost atomic.Bool
	connectV5(t, b.MQTTAddr(), "ka5-pinging-"+randHex(3), func(cc *paho.ClientConfig, cp *paho.Connect) {
		cp.KeepAlive = 60
		cc.OnClientError = func(error) { goodLost.Store(true) }
	})
	if got := p.keepalive.Load(); got != 2 {
		t.Fatalf("client library keep alive = %d, want the Server Keep Alive 2", got)
	}
	select {
	case at := <-lost:
		// Not before 1.5 x 2 s (less a 0.5 s margin). How late is
		// scheduling, not protocol: the only upper
		// bound is the 20 s below, far from the 90 s the client asked for.
		if d := at.Sub(start); d < 2500*time.Millisecond {
			t.Fatalf("silent client disconnected after %s, want about 3s (1.5 x max_keepalive)", d)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("silent client asking for keep alive 60 not disconnected within 20s (max_keepalive 2s; its own would be 90s)")
	}
	if goodLost.Load() {
		t.Fatal("client pinging at the Server Keep Alive was disconnected")
	}
}

// TestMaxKeepaliveV3: MQTT 3.1.1 has no Server Keep Alive; a client asking
// for more than mqtt.max_keepalive is held to the limit silently: it is
// disconnected after 1.5 x the limit without packets, not 1.5 x its own
// keep alive (3.1.1 section 3.1.2.10).
func TestMaxKeepaliveV3(t *testing.T) {
	cfg := testConfig("")
	cfg.MQTT.MaxKeepalive = 2 * time.Second
	b := startBridge(t, cfg)
	lost := make(chan time.Time, 1)
	start := time.Now()
	connectPaho(t, b.MQTTAddr(), "ka3-"+randHex(3), func(o *pahov3.ClientOptions) {
		o.SetKeepAlive(60 * time.Second).SetConnectionLostHandler(func(pahov3.Client, error) {
			select {
			case lost <- time.Now():
			default:
			}
		})
	})
	select {
	case at := <-lost:
		// Not before 1.5 x 2 s; the upper bound is the 20 s below, far from
		// the 90 s of the client's own keep alive (see TestMaxKeepaliveV5).
		if d := at.Sub(start); d < 2500*time.Millisecond {
			t.Fatalf("client disconnected after %s, want about 3s (1.5 x max_keepalive)", d)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("3.1.1 client asking for keep alive 60 not disconnected within 20s (max_keepalive 2s; its own would be 90s)")
	}
}
