package mochipatch

import (
	"bytes"
	"net"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// captureConn is a connection whose writes are kept in w (reads fail).
type captureConn struct {
	net.Conn // nil: only Write is called
	w        bytes.Buffer
}

func (c *captureConn) Write(b []byte) (int, error) { return c.w.Write(b) }

func (c *captureConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1883}
}

// TestWritePacketReusesItsBuffer: a packet is encoded into a reused buffer,
// and each write carries its own packet's bytes. Upstream allocated a fresh
// buffer per packet and grew it twice (5% of an instance's allocations in
// a reconnect storm's replays).
func TestWritePacketReusesItsBuffer(t *testing.T) {
	s := quietServer()
	conn := &captureConn{}
	cl := s.NewClient(conn, "test", "c", false)
	cl.Properties.ProtocolVersion = 4
	pk := func(id uint16, payload string) packets.Packet {
		return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: id,
			TopicName: "fleet/dev42/temp", Payload: []byte(payload)}
	}
	var want bytes.Buffer
	for i, p := range []packets.Packet{pk(1, "a longer payload than the next one"), pk(2, "short")} {
		if err := cl.WritePacket(p); err != nil {
			t.Fatal(err)
		}
		p.ProtocolVersion = 4
		if err := p.PublishEncode(&want); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(conn.w.Bytes(), want.Bytes()) {
			t.Fatalf("after write %d the connection has %x, want %x", i+1, conn.w.Bytes(), want.Bytes())
		}
	}
	if raceEnabled {
		t.Log("allocations not counted under -race: sync.Pool drops a quarter of what is put back")
		return
	}
	conn.w.Grow(1 << 20)
	p := pk(3, "x")
	if n := testing.AllocsPerRun(200, func() { _ = cl.WritePacket(p) }); n > 0 {
		t.Errorf("WritePacket of a QoS 1 PUBLISH: %v allocations, want 0", n)
	}
}
