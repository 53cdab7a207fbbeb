package probe

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// MQTT 3.1.1 control packet types (high nibble of the fixed header) the raw
// engine writes or reads.
const (
	pktConnect   = 1
	pktConnack   = 2
	pktPublish   = 3
	pktPuback    = 4
	pktPubrec    = 5
	pktPubrel    = 6
	pktPubcomp   = 7
	pktSubscribe = 8
	pktSuback    = 9
	pktPingresp  = 13
	pktDisconn   = 14
)

// maxRawPacket bounds a packet the raw engine accepts from a broker (it only
// expects acknowledgements and the probe's own publishes).
const maxRawPacket = 16 << 20

// errProtocol is wrapped when a broker sends something the raw engine
// cannot read.
var errProtocol = errors.New("mqtt protocol error")

// appendVarint appends MQTT's variable byte integer (remaining length).
func appendVarint(b []byte, n int) []byte {
	for {
		d := byte(n % 128)
		n /= 128
		if n > 0 {
			d |= 0x80
		}
		b = append(b, d)
		if n == 0 {
			return b
		}
	}
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// encodeConnect builds a clean-session MQTT 3.1.1 CONNECT with keepalive 0
// (no keepalive: the broker sets no read deadline, so the probe sends no
// PINGREQ).
func encodeConnect(id, user, pass string) []byte {
	var vh []byte
	vh = appendString(vh, "MQTT")
	flags := byte(0x02) // clean session
	if user != "" {
		flags |= 0x80
		if pass != "" {
			flags |= 0x40
		}
	}
	vh = append(vh, 4, flags, 0, 0) // level 4 (3.1.1), flags, keepalive 0
	vh = appendString(vh, id)
	if user != "" {
		vh = appendString(vh, user)
		if pass != "" {
			vh = appendString(vh, pass)
		}
	}
	return append(appendVarint([]byte{pktConnect << 4}, len(vh)), vh...)
}

// encodeSubscribe builds a SUBSCRIBE of one filter.
func encodeSubscribe(pid uint16, filter string, qos byte) []byte {
	var vh []byte
	vh = binary.BigEndian.AppendUint16(vh, pid)
	vh = appendString(vh, filter)
	vh = append(vh, qos)
	return append(appendVarint([]byte{pktSubscribe<<4 | 0x02}, len(vh)), vh...)
}

// publishTemplate is one pre-encoded PUBLISH: the probe copies it whole and
// patches the packet id and the payload's stamp in place.
type publishTemplate struct {
	pkt      []byte
	pidOff   int // offset of the 2-byte packet id (QoS > 0), else -1
	stampOff int // offset of the payload (the stamp's first byte)
}

// newPublishTemplate encodes a PUBLISH of payload on topic at qos.
func newPublishTemplate(topic string, qos byte, payload []byte) publishTemplate {
	rl := 2 + len(topic) + len(payload)
	if qos > 0 {
		rl += 2
	}
	pkt := appendVarint([]byte{pktPublish<<4 | qos<<1}, rl)
	pkt = appendString(pkt, topic)
	t := publishTemplate{pidOff: -1}
	if qos > 0 {
		t.pidOff = len(pkt)
		pkt = append(pkt, 0, 0)
	}
	t.stampOff = len(pkt)
	t.pkt = append(pkt, payload...)
	return t
}

// ackPacket is a 4-byte acknowledgement (PUBACK, PUBREC, PUBREL, PUBCOMP).
func ackPacket(typ byte, pid uint16) [4]byte {
	first := typ << 4
	if typ == pktPubrel {
		first |= 0x02 // [MQTT-3.6.1-1]
	}
	return [4]byte{first, 2, byte(pid >> 8), byte(pid)}
}

// rawPacket is one packet read from a broker. body aliases the reader's
// scratch buffer: valid until the next read.
type rawPacket struct {
	typ   byte
	flags byte
	body  []byte
}

// pid returns the packet identifier of an acknowledgement.
func (p rawPacket) pid() (uint16, error) {
	if len(p.body) < 2 {
		return 0, fmt.Errorf("%w: packet type %d with %d-byte body has no packet id", errProtocol, p.typ, len(p.body))
	}
	return binary.BigEndian.Uint16(p.body), nil
}

// publish splits a PUBLISH body into topic, packet id (0 at QoS 0) and
// payload.
func (p rawPacket) publish() (topic string, pid uint16, payload []byte, err error) {
	b := p.body
	if len(b) < 2 {
		return "", 0, nil, fmt.Errorf("%w: short PUBLISH", errProtocol)
	}
	n := int(binary.BigEndian.Uint16(b))
	if len(b) < 2+n {
		return "", 0, nil, fmt.Errorf("%w: PUBLISH topic length %d beyond its %d-byte body", errProtocol, n, len(b))
	}
	topic, b = string(b[2:2+n]), b[2+n:]
	if qos := (p.flags >> 1) & 3; qos > 0 {
		if len(b) < 2 {
			return "", 0, nil, fmt.Errorf("%w: PUBLISH QoS %d without packet id", errProtocol, qos)
		}
		pid, b = binary.BigEndian.Uint16(b), b[2:]
	}
	return topic, pid, b, nil
}

// packetReader reads MQTT packets from a buffered stream.
type packetReader struct {
	br  *bufio.Reader
	buf []byte
}

// next reads one packet.
func (r *packetReader) next() (rawPacket, error) {
	h, err := r.br.ReadByte()
	if err != nil {
		return rawPacket{}, err
	}
	n, mult := 0, 1
	for i := 0; ; i++ {
		if i == 4 {
			return rawPacket{}, fmt.Errorf("%w: remaining length longer than 4 bytes", errProtocol)
		}
		d, err := r.br.ReadByte()
		if err != nil {
			return rawPacket{}, noEOF(err)
		}
		n += int(d&0x7f) * mult
		if d&0x80 == 0 {
			break
		}
		mult *= 128
	}
	if n > maxRawPacket {
		return rawPacket{}, fmt.Errorf("%w: %d-byte packet above the %d limit", errProtocol, n, maxRawPacket)
	}
	if n > rawBufSize {
		// Large: let the buffer grow with what really arrives, so a bogus
		// length cannot make us allocate 16 MiB up front.
		var bb bytes.Buffer
		if _, err := io.CopyN(&bb, r.br, int64(n)); err != nil {
			return rawPacket{}, noEOF(err)
		}
		return rawPacket{typ: h >> 4, flags: h & 0x0f, body: bb.Bytes()}, nil
	}
	if cap(r.buf) < n {
		r.buf = make([]byte, n)
	}
	b := r.buf[:n]
	if _, err := io.ReadFull(r.br, b); err != nil {
		return rawPacket{}, noEOF(err)
	}
	return rawPacket{typ: h >> 4, flags: h & 0x0f, body: b}, nil
}

// noEOF turns an EOF in the middle of a packet into ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
