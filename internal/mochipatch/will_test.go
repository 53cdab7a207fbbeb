package mochipatch

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// aclHook admits every client and refuses publishing to denied (and, once
// denyAll is set, to everything); it counts the Wills mochi sends.
type aclHook struct {
	mqtt.HookBase
	denied  string
	denyAll atomic.Bool
	sent    atomic.Int32
	// refuse, when set, answers the CONNECT of the client id it names from
	// OnSessionEstablish, as Ferry's session hook refuses one.
	refuse func(cl *mqtt.Client) bool
	server *mqtt.Server
}

func (h *aclHook) ID() string { return "acl" }
func (h *aclHook) Provides(b byte) bool {
	switch b {
	case mqtt.OnConnectAuthenticate, mqtt.OnACLCheck, mqtt.OnWillSent, mqtt.OnSessionEstablish:
		return true
	}
	return false
}
func (h *aclHook) OnConnectAuthenticate(*mqtt.Client, packets.Packet) bool { return true }
func (h *aclHook) OnACLCheck(_ *mqtt.Client, topic string, write bool) bool {
	return !write || topic != h.denied && !h.denyAll.Load()
}
func (h *aclHook) OnWillSent(*mqtt.Client, packets.Packet) { h.sent.Add(1) }
func (h *aclHook) OnSessionEstablish(cl *mqtt.Client, _ packets.Packet) {
	if h.refuse != nil && h.refuse(cl) {
		_ = h.server.SendConnack(cl, packets.ErrQuotaExceeded, false, nil)
		cl.Stop(packets.ErrQuotaExceeded)
	}
}

// connectPipe connects a client over a pipe with CONNECT pk and returns
// its side, the CONNACK read from it, and a channel closed when mochi is
// done with the connection.
func connectPipe(t *testing.T, s *mqtt.Server, pk packets.Packet) (net.Conn, packets.Packet, <-chan struct{}) {
	t.Helper()
	srv, cli := net.Pipe()
	t.Cleanup(func() { cli.Close() })
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.EstablishConnection("t", srv)
	}()
	var buf bytes.Buffer
	if err := pk.ConnectEncode(&buf); err != nil {
		t.Fatal(err)
	}
	_ = cli.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := cli.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(cli)
	fh := new(packets.FixedHeader)
	b, err := r.ReadByte()
	if err != nil {
		t.Fatal(err)
	}
	if err := fh.Decode(b); err != nil {
		t.Fatal(err)
	}
	n, mult := 0, 1
	for range 4 {
		c, err := r.ReadByte()
		if err != nil {
			t.Fatal(err)
		}
		n += int(c&127) * mult
		mult *= 128
		if c < 128 {
			break
		}
	}
	fh.Remaining = n
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		t.Fatal(err)
	}
	ack := packets.Packet{FixedHeader: *fh, ProtocolVersion: pk.ProtocolVersion}
	if err := ack.ConnackDecode(body); err != nil {
		t.Fatal(err)
	}
	_ = cli.SetDeadline(time.Time{})
	return cli, ack, done
}

func aclWillConnect(id, topic string, version byte) packets.Packet {
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: version,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), ClientIdentifier: id, Keepalive: 30, Clean: true}}
	if topic != "" {
		pk.Connect.WillFlag, pk.Connect.WillTopic, pk.Connect.WillPayload = true, topic, []byte("forged")
		pk.Connect.WillQos, pk.Connect.WillRetain = 1, true
	}
	if version == 3 {
		pk.Connect.ProtocolName = []byte("MQIsdp")
	}
	return pk
}

func aclServer(t *testing.T) (*mqtt.Server, *aclHook) {
	t.Helper()
	s := quietServer()
	h := &aclHook{denied: "R/secret/cmd", server: s}
	if err := s.AddHook(h, nil); err != nil {
		t.Fatal(err)
	}
	return s, h
}

// TestWillDeniedAtConnect: a CONNECT whose Will topic the publish ACL
// denies is refused Not authorized (MQTT 3.1.1 return code 5, MQTT 5
// 0x87), as Mosquitto refuses it; upstream accepted it and published the
// Will when the connection dropped. A Will the ACL allows is accepted.
func TestWillDeniedAtConnect(t *testing.T) {
	s, _ := aclServer(t)
	for _, tc := range []struct {
		version byte
		want    byte
	}{{4, packets.Err3NotAuthorized.Code}, {5, packets.ErrNotAuthorized.Code}} {
		_, ack, _ := connectPipe(t, s, aclWillConnect(fmt.Sprintf("m%d", tc.version), "R/secret/cmd", tc.version))
		if ack.ReasonCode != tc.want {
			t.Errorf("MQTT v%d CONNECT with a denied Will: CONNACK 0x%02x, want 0x%02x", tc.version, ack.ReasonCode, tc.want)
		}
		_, ok, _ := connectPipe(t, s, aclWillConnect(fmt.Sprintf("o%d", tc.version), "R/open/x", tc.version))
		if ok.ReasonCode != 0 {
			t.Errorf("MQTT v%d CONNECT with an allowed Will: CONNACK 0x%02x, want 0", tc.version, ok.ReasonCode)
		}
	}
}

// TestWillDeniedWhenSent: a Will is checked against the publish ACL again
// when it is published: one allowed at CONNECT and denied when the
// connection drops is not published (no OnWillSent, nothing retained).
// Upstream published it unchecked.
func TestWillDeniedWhenSent(t *testing.T) {
	s, h := aclServer(t)
	cli, ack, done := connectPipe(t, s, aclWillConnect("m", "R/later/cmd", 4))
	if ack.ReasonCode != 0 {
		t.Fatalf("CONNACK 0x%02x", ack.ReasonCode)
	}
	h.denyAll.Store(true)
	cli.Close() // no DISCONNECT: the Will is due
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("connection not ended")
	}
	if n := h.sent.Load(); n != 0 {
		t.Fatalf("Will published %d times, its topic denied when it was due", n)
	}
	if n := s.Topics.Retained.Len(); n != 0 {
		t.Fatalf("%d retained messages, want none", n)
	}
	// The same with the ACL allowing it: published (the check above can fail).
	h.denyAll.Store(false)
	cli, _, done = connectPipe(t, s, aclWillConnect("m2", "R/later/cmd", 4))
	cli.Close()
	<-done
	if n := h.sent.Load(); n != 1 {
		t.Fatalf("allowed Will published %d times, want 1", n)
	}
}

// TestRefusedInSessionEstablishTakesNothingOver: a hook that answers a
// CONNECT itself from OnSessionEstablish (CONNACK and Stop, as Ferry's
// session hook refuses one) ends the connection there: the connected
// client of the same id keeps its connection and session. Upstream went
// on, took the connected client over and added the refused one.
func TestRefusedInSessionEstablishTakesNothingOver(t *testing.T) {
	s, h := aclServer(t)
	first, ack, _ := connectPipe(t, s, aclWillConnect("id", "", 4))
	if ack.ReasonCode != 0 {
		t.Fatalf("first CONNACK 0x%02x", ack.ReasonCode)
	}
	go drain(first)
	owner, ok := s.Clients.Get("id")
	if !ok {
		t.Fatal("first client not added")
	}
	var refused sync.Once
	h.refuse = func(*mqtt.Client) bool {
		r := false
		refused.Do(func() { r = true })
		return r
	}
	_, ack, done := connectPipe(t, s, aclWillConnect("id", "", 4))
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("refused connection not ended")
	}
	if cur, ok := s.Clients.Get("id"); !ok || cur != owner || owner.Closed() || owner.IsTakenOver() {
		t.Fatalf("after a refused CONNECT of its id: the connected client is still its id's: %v, closed %v, taken over %v",
			ok && cur == owner, owner.Closed(), owner.IsTakenOver())
	}
	if ack.ReasonCode != packets.Err3ServerUnavailable.Code {
		t.Fatalf("refused CONNACK 0x%02x, want 0x03 (quota exceeded, as MQTT 3.1.1 says it)", ack.ReasonCode)
	}
}

// drain reads c until it closes.
func drain(c net.Conn) {
	b := make([]byte, 512)
	for {
		if _, err := c.Read(b); err != nil {
			return
		}
	}
}
