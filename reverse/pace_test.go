package reverse

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// nopConn is a connection nothing is read from or written to.
type nopConn struct{ net.Conn }

func (nopConn) RemoteAddr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

// TestPacerWaitsOnceForAllBusySubscribers (issue 50): one delivery waits
// at most maxWait in all, however many of the topic's subscribers are busy,
// and those still busy then are marked slow. Each subscriber had maxWait
// of its own: n subscribers holding their acknowledgements in turn delayed
// every delivery to everyone by n times maxWait per episode.
func TestPacerWaitsOnceForAllBusySubscribers(t *testing.T) {
	s := mqtt.New(&mqtt.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	const n, maxWait = 5, 200 * time.Millisecond
	for i := range n {
		cl := s.NewClient(nopConn{}, "t", "busy-"+string(rune('a'+i)), false)
		s.Clients.Add(cl)
		s.Topics.Subscribe(cl.ID, packets.Subscription{Filter: "a/b", Qos: 1})
		cl.State.Inflight.Set(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: 1})
		atomic.AddInt64(&s.Info.Inflight, 1)
	}
	p := newPacer(s, slog.New(slog.NewTextHandler(io.Discard, nil)), 1, maxWait)
	start := time.Now()
	if !p.wait(context.Background(), "a/b") {
		t.Fatal("wait: false without a cancelled context")
	}
	took := time.Since(start)
	if len(p.slow) != n {
		t.Errorf("%d subscribers marked slow, want all %d", len(p.slow), n)
	}
	// maxWait in all (200 ms), not n times it (1 s): the bound between
	// leaves room for a loaded machine.
	if took >= 3*maxWait {
		t.Fatalf("one delivery to %d busy subscribers waited %s, want at most about maxWait (%s) in all", n, took, maxWait)
	}
	// Marked slow, they are not waited for again until they catch up.
	start = time.Now()
	p.wait(context.Background(), "a/b")
	if took := time.Since(start); took >= maxWait {
		t.Fatalf("the next delivery waited %s for subscribers marked slow", took)
	}
}
