package bridge

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// dialV5 connects an MQTT v5 client (Eclipse paho.golang) and returns its
// CONNACK, whatever the reason code; the client is disconnected when the
// test ends. cp.ClientID is used as given (it may be empty).
func dialV5(t testing.TB, addr string, cc paho.ClientConfig, cp *paho.Connect) (*paho.Client, *paho.Connack) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	cc.Conn = conn
	if cc.OnClientError == nil {
		cc.OnClientError = func(error) {}
	}
	c := paho.NewClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, cp)
	if ca == nil {
		t.Fatalf("v5 connect: no CONNACK: %v", err)
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	return c, ca
}
