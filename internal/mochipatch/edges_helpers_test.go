package mochipatch

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/packets"
)

// Raw-packet helpers of the tests of issue 53's mochi changes (FERRY.md
// "edges"): a client speaks to a mochi server (allow-all auth) over a pipe,
// with packets built and parsed by mochi's own encoders.

// edgeServer is a quiet mochi server allowing everyone, with opts applied
// to its capabilities first.
func edgeServer(t testing.TB, opts ...func(*mqtt.Capabilities)) *mqtt.Server {
	t.Helper()
	s := quietServer()
	for _, f := range opts {
		f(s.Options.Capabilities)
	}
	if err := s.AddHook(new(auth.AllowHook), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// rawClient is one pipe connection to an edgeServer.
type rawClient struct {
	t    testing.TB
	v    byte
	conn net.Conn
	r    *bufio.Reader
	done chan error // EstablishConnection's return
	in   chan packets.Packet
}

// pump reads the server's packets as they come (next takes them from it):
// a pipe has no buffer, and the server writes to a client under its lock.
func (c *rawClient) pump() {
	c.in = make(chan packets.Packet, 64)
	go func() {
		defer close(c.in)
		for {
			pk, err := c.tryNext(time.Minute)
			if err != nil {
				return
			}
			c.in <- pk
		}
	}()
}

// dialRaw sends connect (its ProtocolVersion set to v) on a new
// connection and returns the client; the CONNACK (or whatever comes) is
// read by the caller.
func dialRaw(t testing.TB, s *mqtt.Server, v byte, connect packets.Packet) *rawClient {
	t.Helper()
	srv, cli := net.Pipe()
	c := &rawClient{t: t, v: v, conn: cli, r: bufio.NewReader(cli), done: make(chan error, 1)}
	go func() { c.done <- s.EstablishConnection("t", srv) }()
	t.Cleanup(func() { cli.Close() })
	connect.FixedHeader.Type = packets.Connect
	connect.ProtocolVersion = v
	if len(connect.Connect.ProtocolName) == 0 {
		connect.Connect.ProtocolName = []byte("MQTT")
		if v == 3 {
			connect.Connect.ProtocolName = []byte("MQIsdp")
		}
	}
	c.send(connect)
	return c
}

// connected dials with a clean session as client id and fails unless the
// CONNACK accepts it.
func connected(t testing.TB, s *mqtt.Server, v byte, id string) *rawClient {
	t.Helper()
	c := dialRaw(t, s, v, packets.Packet{Connect: packets.ConnectParams{Clean: true, Keepalive: 30, ClientIdentifier: id}})
	if ack := c.next(time.Second); ack.FixedHeader.Type != packets.Connack || ack.ReasonCode != 0 {
		t.Fatalf("connect %s: type %d reason %#x", id, ack.FixedHeader.Type, ack.ReasonCode)
	}
	return c
}

// send encodes pk in the client's protocol version and writes it.
func (c *rawClient) send(pk packets.Packet) {
	c.t.Helper()
	pk.ProtocolVersion = c.v
	var b bytes.Buffer
	var err error
	switch pk.FixedHeader.Type {
	case packets.Connect:
		err = pk.ConnectEncode(&b)
	case packets.Publish:
		err = pk.PublishEncode(&b)
	case packets.Puback:
		err = pk.PubackEncode(&b)
	case packets.Pubrec:
		err = pk.PubrecEncode(&b)
	case packets.Pubrel:
		pk.FixedHeader.Qos = 1
		err = pk.PubrelEncode(&b)
	case packets.Pubcomp:
		err = pk.PubcompEncode(&b)
	case packets.Subscribe:
		pk.FixedHeader.Qos = 1
		err = pk.SubscribeEncode(&b)
	case packets.Disconnect:
		err = pk.DisconnectEncode(&b)
	default:
		c.t.Fatalf("no encoder for packet type %d", pk.FixedHeader.Type)
	}
	if err != nil {
		c.t.Fatalf("encode: %v", err)
	}
	c.write(b.Bytes())
}

// write writes raw bytes.
func (c *rawClient) write(b []byte) {
	c.t.Helper()
	_ = c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.conn.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// next reads and decodes one packet within the timeout (fails the test if
// none comes).
func (c *rawClient) next(within time.Duration) packets.Packet {
	c.t.Helper()
	if c.in != nil {
		select {
		case pk, ok := <-c.in:
			if !ok {
				c.t.Fatal("reading a packet: connection closed")
			}
			return pk
		case <-time.After(within):
			c.t.Fatalf("no packet within %s", within)
		}
	}
	pk, err := c.tryNext(within)
	if err != nil {
		c.t.Fatalf("reading a packet: %v", err)
	}
	return pk
}

// tryNext reads and decodes one packet within the timeout; io.EOF: the
// server closed the connection.
func (c *rawClient) tryNext(within time.Duration) (packets.Packet, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(within))
	hb, err := c.r.ReadByte()
	if err != nil {
		return packets.Packet{}, err
	}
	n, shift := 0, 0
	for i := 0; ; i++ {
		b, err := c.r.ReadByte()
		if err != nil {
			return packets.Packet{}, err
		}
		n |= int(b&0x7f) << shift
		shift += 7
		if b&0x80 == 0 || i == 3 {
			break
		}
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c.r, body); err != nil {
		return packets.Packet{}, err
	}
	var fh packets.FixedHeader
	if err := fh.Decode(hb); err != nil {
		return packets.Packet{}, err
	}
	fh.Remaining = n
	pk := packets.Packet{FixedHeader: fh, ProtocolVersion: c.v}
	switch fh.Type {
	case packets.Connack:
		err = pk.ConnackDecode(body)
	case packets.Publish:
		err = pk.PublishDecode(body)
	case packets.Puback:
		err = pk.PubackDecode(body)
	case packets.Pubrec:
		err = pk.PubrecDecode(body)
	case packets.Pubrel:
		err = pk.PubrelDecode(body)
	case packets.Pubcomp:
		err = pk.PubcompDecode(body)
	case packets.Suback:
		err = pk.SubackDecode(body)
	case packets.Disconnect:
		err = pk.DisconnectDecode(body)
	}
	return pk, err
}

// closed reports whether the server closed the connection within the
// timeout, reading (and returning) whatever packets came before.
func (c *rawClient) closed(within time.Duration) (bool, []packets.Packet) {
	var got []packets.Packet
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		pk, err := c.tryNext(time.Until(deadline))
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return false, got
			}
			return true, got
		}
		got = append(got, pk)
	}
	return false, got
}
