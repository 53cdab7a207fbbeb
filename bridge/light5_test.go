package bridge

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// Raw-packet helpers on top of lightClient for the behaviours a client
// library hides (PUBREC bytes, Receive Maximum, when an ack arrives).
// Packets are built and parsed with mochi's own encoders.

// dialLight5 connects a raw MQTT 5 client with the given CONNECT properties.
func dialLight5(t testing.TB, addr, id string, clean bool, props packets.Properties) *lightClient {
	t.Helper()
	c, err := dialLightConnect(&net.Dialer{Timeout: 5 * time.Second}, addr, packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 5,
		Connect:    packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: clean, Keepalive: 30, ClientIdentifier: id},
		Properties: props,
	})
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	t.Cleanup(c.close)
	return c
}

// send encodes pk as MQTT version v and writes it at once.
func (c *lightClient) send(t testing.TB, v byte, pk packets.Packet) {
	t.Helper()
	c.queue(t, v, pk)
	_ = c.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if err := c.flush(); err != nil {
		t.Fatalf("send %v: %v", pk.FixedHeader.Type, err)
	}
}

// queue encodes pk into the output buffer (written by flush or send).
func (c *lightClient) queue(t testing.TB, v byte, pk packets.Packet) {
	t.Helper()
	pk.ProtocolVersion = v
	var err error
	switch pk.FixedHeader.Type {
	case packets.Publish:
		err = pk.PublishEncode(&c.out)
	case packets.Puback:
		err = pk.PubackEncode(&c.out)
	case packets.Pubrec:
		err = pk.PubrecEncode(&c.out)
	case packets.Pubrel:
		pk.FixedHeader.Qos = 1
		err = pk.PubrelEncode(&c.out)
	case packets.Pubcomp:
		err = pk.PubcompEncode(&c.out)
	case packets.Disconnect:
		err = pk.DisconnectEncode(&c.out)
	case packets.Subscribe:
		pk.FixedHeader.Qos = 1
		err = pk.SubscribeEncode(&c.out)
	default:
		err = fmt.Errorf("no encoder for type %d", pk.FixedHeader.Type)
	}
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
}

// next reads one packet (within the timeout) and decodes it as MQTT
// version v; raw is its body as sent.
func (c *lightClient) next(t testing.TB, v byte, within time.Duration) (pk packets.Packet, raw []byte) {
	t.Helper()
	pk, raw, err := c.tryNext(v, within)
	if err != nil {
		t.Fatalf("reading a packet: %v", err)
	}
	return pk, raw
}

func (c *lightClient) tryNext(v byte, within time.Duration) (pk packets.Packet, raw []byte, err error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(within))
	hb, body, err := c.read()
	if err != nil {
		return pk, nil, err
	}
	var fh packets.FixedHeader
	if err := fh.Decode(hb); err != nil {
		return pk, nil, err
	}
	fh.Remaining = len(body)
	pk = packets.Packet{FixedHeader: fh, ProtocolVersion: v}
	switch fh.Type {
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
	return pk, body, err
}

// isTimeout reports whether err is a read deadline passing.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func publishPacket(topic string, qos byte, id uint16, payload string) packets.Packet {
	return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos},
		TopicName: topic, PacketID: id, Payload: []byte(payload)}
}
