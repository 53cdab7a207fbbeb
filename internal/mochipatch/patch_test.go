package mochipatch

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"net"
	"runtime"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/packets"
)

// rejectHook refuses every publish, as Ferry's forward hook does for each
// QoS 1 publish (it acknowledges after Kafka itself).
type rejectHook struct{ mqtt.HookBase }

func (rejectHook) ID() string           { return "reject" }
func (rejectHook) Provides(b byte) bool { return b == mqtt.OnPublish }
func (rejectHook) OnPublish(_ *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	return pk, packets.ErrRejectPacket
}

// TestRejectedPublishBuildsNoDebugLine: mochi's "publish packet rejected"
// debug line is built only when debug is on. Upstream builds it for every
// rejected publish, debug off too: the 800-byte packet boxed into the
// line's arguments was 9% of the forward path's CPU. What is left is the
// boxing of two small error values.
func TestRejectedPublishBuildsNoDebugLine(t *testing.T) {
	hooks := &mqtt.Hooks{Log: slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	if err := hooks.Add(&rejectHook{}, nil); err != nil {
		t.Fatal(err)
	}
	cl := &mqtt.Client{ID: "c"}
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: 7, TopicName: "a/b", Payload: []byte("x")}
	r := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = hooks.OnPublish(cl, pk)
		}
	})
	if n := r.AllocedBytesPerOp(); n > 128 {
		t.Fatalf("a rejected publish allocates %d bytes in mochi's hooks with debug off, want at most 128 (the packet boxed for the debug line is %d)", n, 800)
	}
}

// TestReadPacketCopiesOnce: a PUBLISH's bytes are read into a buffer of
// their own and decoded there; upstream copied them once more first.
func TestReadPacketCopiesOnce(t *testing.T) {
	payload := bytes.Repeat([]byte("p"), 4096)
	var pkt bytes.Buffer
	if err := (&packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: 9,
		TopicName: "a/b", Payload: payload, ProtocolVersion: 4}).PublishEncode(&pkt); err != nil {
		t.Fatal(err)
	}
	raw := pkt.Bytes()
	server := quietServer()
	srv, cli := net.Pipe()
	defer srv.Close()
	defer cli.Close()
	cl := server.NewClient(srv, "t", "c", false)
	const n = 200
	go func() {
		for range n {
			if _, err := cli.Write(raw); err != nil {
				return
			}
		}
	}()
	read := func() {
		fh := new(packets.FixedHeader)
		if err := cl.ReadFixedHeader(fh); err != nil {
			t.Fatal(err)
		}
		if _, err := cl.ReadPacket(fh); err != nil {
			t.Fatal(err)
		}
	}
	read() // the reader's buffers
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n - 1 {
		read()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / (n - 1); per > uint64(len(payload))*3/2 {
		t.Fatalf("reading a %d-byte PUBLISH allocates %d bytes, want one copy of it", len(raw), per)
	}
}

// preboxedRejectHook rejects every publish with an error boxed once, as
// Ferry's forward hook does.
type preboxedRejectHook struct{ mqtt.HookBase }

var errReject error = packets.ErrRejectPacket

func (preboxedRejectHook) ID() string           { return "reject-preboxed" }
func (preboxedRejectHook) Provides(b byte) bool { return b == mqtt.OnPublish }
func (preboxedRejectHook) OnPublish(_ *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	return pk, errReject
}

// TestRejectedPublishAllocatesNothing: with a hook that returns a boxed
// error, mochi's OnPublish allocates nothing for a rejected publish.
// Upstream's errors.Is(err, packets.ErrRejectPacket) boxes the struct
// target on every call (4% of the bridge's CPU in runtime.convT under load,
// with the same boxing in processPublish).
func TestRejectedPublishAllocatesNothing(t *testing.T) {
	hooks := &mqtt.Hooks{Log: slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	if err := hooks.Add(&preboxedRejectHook{}, nil); err != nil {
		t.Fatal(err)
	}
	cl := &mqtt.Client{ID: "c"}
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: 7, TopicName: "a/b", Payload: []byte("x")}
	if n := testing.AllocsPerRun(200, func() { _, _ = hooks.OnPublish(cl, pk) }); n != 0 {
		t.Fatalf("a rejected publish: %v allocations in mochi's hooks, want 0", n)
	}
}

// countingHook counts how often mochi asks it what it provides, and how
// often its OnPublish runs.
type countingHook struct {
	mqtt.HookBase
	id       string
	provides byte
	asked    int
	calls    *[]string
}

func (h *countingHook) ID() string { return h.id }
func (h *countingHook) Provides(b byte) bool {
	h.asked++
	return b == h.provides
}
func (h *countingHook) OnPublish(_ *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	*h.calls = append(*h.calls, h.id)
	return pk, nil
}

// TestHooksAskProvidesOnceWhenAdded: mochi asks each hook's Provides once
// per hook method when the hook is added, not for every hook on every event
// of every packet (with Ferry's seven hooks that was 3% of the forward
// path's CPU); the hooks that provide a method still run in the order they
// were added, and the others do not.
func TestHooksAskProvidesOnceWhenAdded(t *testing.T) {
	hooks := &mqtt.Hooks{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	var calls []string
	hs := []*countingHook{
		{id: "a", provides: mqtt.OnPublish, calls: &calls},
		{id: "b", provides: mqtt.OnConnect, calls: &calls},
		{id: "c", provides: mqtt.OnPublish, calls: &calls},
	}
	for _, h := range hs {
		if err := hooks.Add(h, nil); err != nil {
			t.Fatal(err)
		}
	}
	asked := 0
	for _, h := range hs {
		asked += h.asked
	}
	cl := &mqtt.Client{ID: "c"}
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: 7, TopicName: "a/b"}
	const n = 100
	for range n {
		_, _ = hooks.OnPublish(cl, pk)
		_, _ = hooks.OnPacketRead(cl, pk)
		hooks.OnPacketProcessed(cl, pk, nil)
		_ = hooks.OnACLCheck(cl, "a/b", true)
	}
	for _, h := range hs {
		asked -= h.asked
	}
	if asked != 0 {
		t.Fatalf("%d packets' events asked the hooks' Provides %d times, want 0 (asked when added)", n, -asked)
	}
	if want := n * 2; len(calls) != want || calls[0] != "a" || calls[1] != "c" {
		t.Fatalf("OnPublish ran %d hooks (first %v), want %d: a then c, never b", len(calls), calls[:min(len(calls), 4)], want)
	}
}

// TestQoS2PublishUnderAnIdAwaitingPubrel: processPublish looks at the type
// of the packet in flight under a QoS 2 publish's id (no longer a copy of
// it); a PUBLISH under an id whose PUBREC still waits for its PUBREL is
// answered PUBREC 0x91, Packet Identifier in use [MQTT-4.3.3-10], and one
// under a free id is accepted. It passes upstream too: it holds what change
// 4 of FERRY.md must keep.
func TestQoS2PublishUnderAnIdAwaitingPubrel(t *testing.T) {
	server := quietServer()
	if err := server.AddHook(new(auth.AllowHook), nil); err != nil {
		t.Fatal(err)
	}
	srv, cli := net.Pipe()
	defer srv.Close()
	defer cli.Close()
	cl := server.NewClient(srv, "t", "c", false)
	cl.Properties.ProtocolVersion = 5
	cl.State.Inflight.ResetReceiveQuota(10)
	cl.State.Inflight.Set(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrec}, PacketID: 5})
	codes := make(chan [2]byte, 2)
	go func() {
		r := bufio.NewReader(cli)
		for {
			b, err := r.ReadByte()
			if err != nil {
				return
			}
			n, _, err := packets.DecodeLength(r)
			if err != nil {
				return
			}
			body := make([]byte, n)
			if _, err := io.ReadFull(r, body); err != nil {
				return
			}
			if b>>4 == packets.Pubrec && len(body) >= 3 {
				codes <- [2]byte{body[1], body[2]} // low byte of the id, reason code
			}
		}
	}()
	publish := func(id uint16) {
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 2}, PacketID: id, TopicName: "a/b", Payload: []byte("x")}
		go func() { _ = server.InjectPacket(cl, pk) }()
	}
	publish(5)
	select {
	case got := <-codes:
		if want := [2]byte{5, 0x91}; got != want {
			t.Fatalf("QoS 2 PUBLISH under an id awaiting PUBREL: PUBREC id/reason %x, want %x", got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("QoS 2 PUBLISH under an id awaiting PUBREL: no PUBREC in 5 s, want PUBREC 0x91")
	}
	publish(6) // a free id: accepted, its PUBREC in flight
	for range 200 {
		if pk, ok := cl.State.Inflight.Get(6); ok && pk.FixedHeader.Type == packets.Pubrec {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("QoS 2 PUBLISH under a free id: no PUBREC in flight, want it accepted")
}
