package probe

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/probe/stamp"
)

// This file builds a miniature bridge for tests that must not depend on
// package bridge: an in-process MQTT broker (mochi) and forwarders that move
// messages between it and Kafka (kfake or real), optionally delaying,
// dropping, duplicating or reordering them, so the probe's figures can be
// checked against known answers.

// testBroker is an in-process MQTT broker on 127.0.0.1:0.
type testBroker struct {
	srv *mqtt.Server
	url string
}

func startBroker(t testing.TB) *testBroker {
	t.Helper()
	srv := mqtt.New(&mqtt.Options{InlineClient: true, Logger: slog.New(slog.DiscardHandler)})
	if err := srv.AddHook(new(auth.AllowHook), nil); err != nil {
		t.Fatal(err)
	}
	l := listeners.NewTCP(listeners.Config{ID: "t", Address: "127.0.0.1:0"})
	if err := srv.AddListener(l); err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return &testBroker{srv: srv, url: "tcp://" + l.Address()}
}

// startKfake returns the address of an in-process Kafka with topics seeded
// (1 partition each). Its records carry CreateTime.
func startKfake(t *testing.T, topics ...string) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topics...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// transform decides what a forwarder emits for one message: nothing
// (drop), the message, or several messages (duplicates, foreign messages,
// held-back messages for reordering). It runs on the forwarder goroutine.
type transform func(p []byte, emit func([]byte))

func passThrough(p []byte, emit func([]byte)) { emit(p) }

// holdUntilStamp emits each message delay after the send time in its stamp
// (the intended send time in open loop), whatever happened before: the
// probe must then report exactly delay plus the last MQTT hop.
func holdUntilStamp(delay time.Duration) transform {
	return func(p []byte, emit func([]byte)) {
		st, err := stamp.Parse(p)
		if err == nil {
			time.Sleep(time.Until(time.Unix(0, st.SentNs).Add(delay)))
		}
		emit(p)
	}
}

// queued is a payload and when it reached the forwarder.
type queued struct {
	p  []byte
	at time.Time
}

// forwarder runs a transform for each queued payload, in order, on one
// goroutine, and emits each result delay after the payload arrived (an
// absolute deadline, so the injected delay does not accumulate sleep
// overshoot or queueing).
type forwarder struct {
	in     chan queued
	wg     sync.WaitGroup
	mu     sync.Mutex
	closed bool
}

func startForwarder(t testing.TB, delay time.Duration, tf transform, out func([]byte)) *forwarder {
	f := &forwarder{in: make(chan queued, 1<<16)}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for q := range f.in {
			tf(q.p, func(p []byte) {
				if d := time.Until(q.at.Add(delay)); d > 0 {
					time.Sleep(d) // the injected delay under test
				}
				out(p)
			})
		}
	}()
	t.Cleanup(f.stop)
	return f
}

// push queues p unless the forwarder has stopped.
func (f *forwarder) push(p []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.in <- queued{p: p, at: time.Now()}
	}
}

func (f *forwarder) stop() {
	f.mu.Lock()
	if !f.closed {
		f.closed = true
		close(f.in)
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// forwardHook hands publishes on topic from network clients to a forwarder.
type forwardHook struct {
	mqtt.HookBase
	topic string
	fwd   *forwarder
}

func (h *forwardHook) ID() string { return "test-forward" }
func (h *forwardHook) Provides(b byte) bool {
	return b == mqtt.OnPublished
}
func (h *forwardHook) OnPublished(cl *mqtt.Client, pk packets.Packet) {
	if cl.Net.Inline || pk.TopicName != h.topic {
		return
	}
	h.fwd.push(append([]byte(nil), pk.Payload...))
}

// forwardMQTTToKafka bridges mqttTopic on b to kafkaTopic on brokers.
func forwardMQTTToKafka(t *testing.T, b *testBroker, brokers []string, mqttTopic, kafkaTopic string, delay time.Duration, tf transform) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(kafkaTopic), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	fwd := startForwarder(t, delay, tf, func(p []byte) {
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Value: p}).FirstErr(); err != nil {
			t.Errorf("forwarder produce: %v", err)
		}
	})
	t.Cleanup(func() {
		fwd.stop()
		cl.Close()
	})
	if err := b.srv.AddHook(&forwardHook{topic: mqttTopic, fwd: fwd}, nil); err != nil {
		t.Fatal(err)
	}
}

// forwardKafkaToMQTT consumes kafkaTopic from its start and publishes each
// record on mqttTopic through b's inline client at qos.
func forwardKafkaToMQTT(t *testing.T, b *testBroker, brokers []string, kafkaTopic, mqttTopic string, qos byte, delay time.Duration, tf transform) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(kafkaTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	fwd := startForwarder(t, delay, tf, func(p []byte) {
		if err := b.srv.Publish(mqttTopic, p, false, qos); err != nil {
			t.Errorf("forwarder publish: %v", err)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			if fs.IsClientClosed() {
				return
			}
			fs.EachRecord(func(r *kgo.Record) {
				fwd.push(r.Value)
			})
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		fwd.stop()
		cl.Close()
	})
}

// forwardMQTT republishes publishes on topic to other on b after delay,
// without Kafka: the shortest path on which to check the probe's clock.
func forwardMQTT(t testing.TB, b *testBroker, topic, other string, qos byte, delay time.Duration) {
	t.Helper()
	forwardMQTTWith(t, b, topic, other, qos, delay, passThrough)
}

func forwardMQTTWith(t testing.TB, b *testBroker, topic, other string, qos byte, delay time.Duration, tf transform) {
	t.Helper()
	fwd := startForwarder(t, delay, tf, func(p []byte) {
		if err := b.srv.Publish(other, p, false, qos); err != nil {
			t.Errorf("forwarder publish: %v", err)
		}
	})
	if err := b.srv.AddHook(&forwardHook{topic: topic, fwd: fwd}, nil); err != nil {
		t.Fatal(err)
	}
}
