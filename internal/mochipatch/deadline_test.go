package mochipatch

import (
	"bytes"
	"net"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// TestReadDeadlineOneAndAHalfKeepalives: a client silent after a packet is
// cut off 1.5 keepalives after it [MQTT-3.1.2-22], not sooner. Upstream
// set keepalive + keepalive/2 in whole seconds: 1 s for a keepalive of 1
// (and 4 s for 3), cutting off a client that sends a packet every 1.2 s.
func TestReadDeadlineOneAndAHalfKeepalives(t *testing.T) {
	server := quietServer()
	srv, cli := net.Pipe()
	defer srv.Close()
	defer cli.Close()
	cl := server.NewClient(srv, "t", "c", false)
	cl.State.Keepalive = 1
	var last atomic.Int64
	done := make(chan error, 1)
	go func() {
		done <- cl.Read(func(*mqtt.Client, packets.Packet) error {
			last.Store(time.Now().UnixNano())
			return nil
		})
	}()
	var one bytes.Buffer
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: 1,
		TopicName: "a/b", Payload: []byte("x"), ProtocolVersion: 4}
	if err := pk.PublishEncode(&one); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Write(one.Bytes()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a client silent for 5 s with a keepalive of 1 s still connected")
	}
	silent := time.Since(time.Unix(0, last.Load()))
	if silent < 1500*time.Millisecond || silent > 2500*time.Millisecond {
		t.Fatalf("cut off %s after its last packet, keepalive 1 s: want 1.5 s", silent.Round(time.Millisecond))
	}
}
