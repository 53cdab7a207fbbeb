package session

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/internal/testhelp"
	"github.com/ferry-bridge/ferry/state"
	"github.com/ferry-bridge/ferry/topicmap"
)

// TestLastPassWaitsForHeldLiveDelivery: the replay's last pass runs while
// the resumed session's live deliveries are held (replay_hold.go). It meets
// the record of a held live delivery M (pending: skipped, the live copy
// comes) and then the partition's next record N, not delivered live (yet).
// Writing N at once put it on the wire before M, released only after the
// pass: the client's first arrivals were N, M (the full-size sessions soak,
// 4 sessions of 1,000). The pass must keep N until M is written.
func TestLastPassWaitsForHeldLiveDelivery(t *testing.T) {
	h, _, o, rs, ktopic, got := lastPassFixture(t)

	// catchUp's last pass, step by step.
	release := o.live.start(&h.holding, &h.tracking)
	defer o.live.end(&h.tracking)
	// M (offset 5) delivered live: held in the write loop, pending.
	h.inj.Begin(mqtt.InlineClientId, Coord{ktopic, 0, 5}, "q/a")
	if err := h.server.Publish("q/a", []byte("M"), false, 1); err != nil {
		t.Fatal(err)
	}
	h.inj.End(mqtt.InlineClientId)
	rs.later = newDeferrals()
	passTakes(t, rs, ktopic, "M", "N") // offsets 5, 6
	release()
	drainWantsMN(t, rs, o, ktopic, got, "the last pass wrote a later record before the held live delivery")
}

// TestLastPassDeliversDroppedLiveDelivery: mochi puts a live delivery M in
// flight (OnQosPublish: pending) and drops it a moment later, its client's
// outbound queue full (OnPublishDropped). The last pass met M's record in
// between: pending, so it skipped it and kept the partition's next record
// N behind it. The drain must deliver M after all, before N; else the pass
// ended past a message the client never got, and a resume elsewhere would
// not bring it either.
func TestLastPassDeliversDroppedLiveDelivery(t *testing.T) {
	h, cl, o, rs, ktopic, got := lastPassFixture(t)
	release := o.live.start(&h.holding, &h.tracking)
	defer o.live.end(&h.tracking)
	rs.later = newDeferrals()
	const origin, pid = "pub", uint16(7)
	h.inj.Begin(origin, Coord{ktopic, 0, 5}, "q/a")
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: "q/a",
		Payload: []byte("M"), PacketID: pid, Origin: origin, Created: time.Now().Unix()}
	cl.State.Inflight.Set(pk)
	h.OnQosPublish(cl, pk, pk.Created, 0)
	o.pos.reading(tp{ktopic, 0}, 5)    // as read does for each partition it assigns
	passTakes(t, rs, ktopic, "M", "N") // offsets 5, 6
	cl.State.Inflight.Delete(pid)      // mochi frees the dropped delivery's packet id
	h.OnPublishDropped(cl, pk)
	h.inj.End(origin)
	release()
	drainWantsMN(t, rs, o, ktopic, got, "the dropped live delivery M was not delivered by the pass")
}

// lastPassFixture is a sessionHook with one persistent client "dev"
// subscribed to q/# (its connection's publishes go to got) and a replay of
// it; ktopic is the Kafka topic of q/a.
func lastPassFixture(t *testing.T) (*sessionHook, *mqtt.Client, *ownedSession, *replayRun, string, chan string) {
	t.Helper()
	server := mqtt.New(&mqtt.Options{InlineClient: true})
	if err := server.AddHook(new(auth.AllowHook), nil); err != nil {
		t.Fatal(err)
	}
	h := newSessionHook(testhelp.Logger(t), server, nil, "a", time.Second, nil)
	h.inj = new(Injections)
	if err := server.AddHook(h, nil); err != nil {
		t.Fatal(err)
	}
	srvConn, cliConn := net.Pipe()
	cl := server.NewClient(srvConn, "t", "dev", false)
	cl.Properties.ProtocolVersion = 4
	server.Clients.Add(cl)
	go cl.WriteLoop()
	got := make(chan string, 8)
	go readPublishes(cliConn, got)
	t.Cleanup(func() { cl.Stop(nil); _ = cliConn.Close(); _ = server.Close() })
	o := &ownedSession{cl: cl, pos: newSessionPositions(nil, nil, 0, nil)}
	h.owned["dev"] = o

	tm, err := topicmap.New(topicmap.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sm, err := newStateMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ktopic, err := topicmap.EncodeTopic("q/a")
	if err != nil {
		t.Fatal(err)
	}
	rs := &replayRun{r: &replayer{h: h, log: testhelp.Logger(t), tm: tm, metrics: sm}, o: o, cl: cl,
		subs: []state.Subscription{{Filter: "q/#", QoS: 1}}}
	sub := packets.Subscription{Filter: "q/#", Qos: 1}
	server.Topics.Subscribe(cl.ID, sub)
	cl.State.Subscriptions.Add(sub.Filter, sub)
	return h, cl, o, rs, ktopic, got
}

// passTakes hands the last pass the records of ktopic/0 with these
// payloads, at offsets 5, 6, ...
func passTakes(t *testing.T, rs *replayRun, ktopic string, payloads ...string) {
	t.Helper()
	now := time.Now()
	for i, p := range payloads {
		rec := &kgo.Record{Topic: ktopic, Partition: 0, Offset: int64(5 + i), Value: []byte(p), Timestamp: now}
		if err := rs.take(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
	}
}

// drainWantsMN runs the drain of the pass (ktopic/0 up to offset 7): the
// client must get M, then N, and the position stay at M's offset 5 (both
// unacknowledged); why says what went wrong otherwise.
func drainWantsMN(t *testing.T, rs *replayRun, o *ownedSession, ktopic string, got <-chan string, why string) {
	t.Helper()
	if err := rs.drain(context.Background(), map[tp]int64{{ktopic, 0}: 7}); err != nil {
		t.Fatal(err)
	}
	if order := arrivals(t, got, 2); order[0] != "M" || order[1] != "N" {
		t.Fatalf("the client got %v first, want [M N]: %s", order, why)
	}
	if pos := o.pos.snapshot(); len(pos) != 1 || pos[0].Offset != 5 {
		t.Fatalf("positions %+v, want offset 5 (M and N unacknowledged)", pos)
	}
}

// arrivals reads n payloads from got, failing after 10 s.
func arrivals(t *testing.T, got <-chan string, n int) []string {
	t.Helper()
	var order []string
	for len(order) < n {
		select {
		case p := <-got:
			order = append(order, p)
		case <-time.After(10 * time.Second):
			t.Fatalf("the client got %v in 10 s, want %d messages", order, n)
		}
	}
	return order
}

// readPublishes sends the payload of every MQTT 3.1.1 PUBLISH read from c
// to out, until c fails.
func readPublishes(c net.Conn, out chan<- string) {
	r := bufio.NewReader(c)
	for {
		b0, err := r.ReadByte()
		if err != nil {
			return
		}
		n, mul := 0, 1
		for {
			b, err := r.ReadByte()
			if err != nil {
				return
			}
			n += int(b&127) * mul
			mul *= 128
			if b&128 == 0 {
				break
			}
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		if b0>>4 != packets.Publish || len(body) < 2 {
			continue
		}
		tl := int(binary.BigEndian.Uint16(body))
		rest := body[2+tl:]
		if (b0>>1)&3 > 0 {
			rest = rest[2:]
		}
		out <- string(rest)
	}
}
