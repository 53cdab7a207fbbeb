package bridge

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// connectV5 connects an MQTT v5 client (Eclipse paho.golang).
func connectV5(t testing.TB, addr, id string, opts ...func(*paho.ClientConfig, *paho.Connect)) *paho.Client {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	cc := paho.ClientConfig{Conn: conn, ClientID: id}
	cp := &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: true}
	for _, f := range opts {
		f(&cc, cp)
	}
	c := paho.NewClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, cp)
	if err != nil {
		t.Fatalf("v5 connect: %v", err)
	}
	if ca.ReasonCode != 0 {
		t.Fatalf("v5 connack reason %#x", ca.ReasonCode)
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	return c
}
