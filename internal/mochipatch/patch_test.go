package mochipatch

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"runtime"
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
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
	server := mqtt.New(&mqtt.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
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
