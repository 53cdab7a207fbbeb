package mochipatch

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/packets"
)

// lockedConn records what is written to it; safe to read while written.
type lockedConn struct {
	net.Conn // nil: only Write and RemoteAddr are called
	mu       sync.Mutex
	w        bytes.Buffer
}

func (c *lockedConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.w.Write(b)
}

func (c *lockedConn) has(p []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Contains(c.w.Bytes(), p)
}

func (*lockedConn) Close() error { return nil }

func (c *lockedConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1883}
}

// tooLargeHook gives every PUBLISH whose payload is "big" a maximum size
// it exceeds, as a client's Maximum Packet Size (or Ferry's discard of a
// live copy) does.
type tooLargeHook struct{ mqtt.HookBase }

func (tooLargeHook) ID() string           { return "too-large" }
func (tooLargeHook) Provides(b byte) bool { return b == mqtt.OnPacketEncode }
func (tooLargeHook) OnPacketEncode(_ *mqtt.Client, pk packets.Packet) packets.Packet {
	if string(pk.Payload) == "big" {
		pk.Mods.MaxSize = 1
	}
	return pk
}

// TestRefusedPacketFlushesWhatWasBuffered: the write loop buffers a packet
// when more wait in the queue behind it, for the next write to flush. When
// that next packet is refused before its write (too large for the client),
// the buffered one must still reach the connection. Upstream returned
// before the flush: the earlier packet stayed in the buffer until some
// later write, possibly never (a resumed Ferry session whose live copy was
// discarded so did not get the live message written before it).
func TestRefusedPacketFlushesWhatWasBuffered(t *testing.T) {
	s := mqtt.New(&mqtt.Options{InlineClient: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	for _, h := range []mqtt.Hook{new(auth.AllowHook), &tooLargeHook{}} {
		if err := s.AddHook(h, nil); err != nil {
			t.Fatal(err)
		}
	}
	conn := &lockedConn{}
	cl := s.NewClient(conn, "test", "sub", false)
	cl.Properties.ProtocolVersion = 4
	s.Clients.Add(cl)
	sub := packets.Subscription{Filter: "a/b", Qos: 0}
	cl.State.Subscriptions.Add(sub.Filter, sub)
	s.Topics.Subscribe(cl.ID, sub)
	// Both wait in the write queue before the write loop starts: the first
	// is written while the second waits behind it.
	for _, p := range []string{"first", "big"} {
		if err := s.Publish("a/b", []byte(p), false, 0); err != nil {
			t.Fatal(err)
		}
	}
	go cl.WriteLoop()
	defer cl.Stop(nil)
	deadline := time.Now().Add(5 * time.Second)
	for !conn.has([]byte("first")) {
		if time.Now().After(deadline) {
			t.Fatal("the packet written before a refused one never reached the connection (left in the write buffer)")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
