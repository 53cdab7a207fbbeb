package bridge

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pahov3 "github.com/eclipse/paho.mqtt.golang"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/rawproduce"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
	"github.com/ferry-bridge/ferry/topicmap"
)

// TestResumeGetsAPublishKafkaAcknowledgedAfterItsReplay: a QoS 1 publish
// that arrives while nobody here subscribes, and that Kafka acknowledges
// only after a persistent session resumed here and its replay listed the
// partition's end, reaches that session live. Neither path had it: the
// replay's end was below it, and the local delivery was decided when the
// PUBLISH arrived (nobody subscribed then), not when Kafka acknowledged
// it. The session's next acknowledged message then moved its position past
// it for good (the default-mode sessions soak, 2026-12-06: after a kill,
// a publisher's first resend on a survivor reached no session resumed
// there meanwhile).
func TestResumeGetsAPublishKafkaAcknowledgedAfterItsReplay(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	gate := &produceGate{}
	b := startBridge(t, testConfig(brokers), func(b *Bridge) {
		b.wrapTransport = func(rt kafka.RoundTripper) kafka.RoundTripper { gate.next = rt; return gate }
	})
	id, topic := "late-"+randHex(4), "late/"+randHex(4)
	ktopic, err := topicmap.EncodeTopic(topic)
	if err != nil {
		t.Fatal(err)
	}
	// The session holds a position in the partition, then goes offline.
	col := &collector{}
	sub := subscribePaho(t, b.MQTTAddr(), id, topic, false, col)
	pub := connectPaho(t, b.MQTTAddr(), "pub-"+randHex(4))
	publishN(t, pub, topic, 0, 1)
	waitFor(t, 10*time.Second, "the first message", func() bool { return col.len() >= 1 })
	sub.Disconnect(100)
	waitFor(t, 10*time.Second, "nobody subscribed here", func() bool {
		_, held := b.server.Clients.Get(id)
		return !held && atomic.LoadInt64(&b.server.Info.Subscriptions) == 0 && !b.stateEngine.Injections().Replaying()
	})

	// Published now; Kafka's acknowledgement waits at the gate.
	gate.hold(ktopic)
	tok := pub.Publish(topic, 1, false, "0.1")
	waitFor(t, 10*time.Second, "the produce request at the gate", gate.holding)

	got := &collector{}
	again := connectPaho(t, b.MQTTAddr(), id, func(o *pahov3.ClientOptions) {
		o.SetCleanSession(false).SetOrderMatters(true).SetDefaultPublishHandler(got.handler)
	})
	defer again.Disconnect(100)
	waitFor(t, 30*time.Second, "the replay to end", func() bool {
		return atomic.LoadInt64(&b.server.Info.Subscriptions) > 0 && !b.stateEngine.Injections().Replaying()
	})
	gate.release()
	if !tok.WaitTimeout(15*time.Second) || tok.Error() != nil {
		t.Fatalf("publish: %v", tok.Error())
	}
	deadline := time.Now().Add(10 * time.Second)
	for got.len() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if msgs := got.snapshot(); len(msgs) != 1 || msgs[0] != "0.1" {
		t.Fatalf("the resumed session got %q; want the message Kafka acknowledged after its replay (\"0.1\")", msgs)
	}
}

// produceGate is a kafka-go transport that holds the produce requests
// writing to one topic until release.
type produceGate struct {
	next    kafka.RoundTripper
	mu      sync.Mutex
	topic   string
	open    chan struct{}
	waiting atomic.Int32
}

func (g *produceGate) hold(topic string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.topic, g.open = topic, make(chan struct{})
}

func (g *produceGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open != nil {
		close(g.open)
		g.open = nil
	}
}

func (g *produceGate) holding() bool { return g.waiting.Load() > 0 }

func (g *produceGate) RoundTrip(ctx context.Context, addr net.Addr, req kafka.Request) (kafka.Response, error) {
	if pr, ok := req.(*rawproduce.Request); ok { // the producer's (producer/send.go)
		g.mu.Lock()
		topic, open := g.topic, g.open
		g.mu.Unlock()
		for _, rt := range pr.Topics {
			if open != nil && rt.Topic == topic {
				g.waiting.Add(1)
				select {
				case <-open:
				case <-ctx.Done():
				}
				g.waiting.Add(-1)
				break
			}
		}
	}
	return g.next.RoundTrip(ctx, addr, req)
}
