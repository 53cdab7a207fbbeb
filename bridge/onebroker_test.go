package bridge

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	pahov3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
)

// Issue 54: instances are one broker with the default configuration (no
// reverse.topics): what is published on one instance reaches the
// subscribers of every other, and a persistent session resumes anywhere
// with nothing missing, whichever instances its publishers used.

// threeInstances starts three bridges with the default configuration on
// the real Kafka, sharing their state topics.
func threeInstances(t testing.TB) [3]*Bridge {
	t.Helper()
	brokers := kafkatest.Brokers(t)
	tag := randHex(4)
	var out [3]*Bridge
	for i := range out {
		cfg := testConfig(brokers)
		cfg.State.SessionsTopic, cfg.State.RetainedTopic, cfg.State.Partitions = "_ferry_sessions_o"+tag, "_ferry_retained_o"+tag, 3
		out[i] = startBridge(t, cfg)
	}
	return out
}

// seqCollector records the payloads "<n>" a subscriber receives, in order.
type seqCollector struct {
	mu  sync.Mutex
	got []int
}

func (c *seqCollector) add(payload []byte) {
	n, err := strconv.Atoi(string(payload))
	if err != nil {
		return
	}
	c.mu.Lock()
	c.got = append(c.got, n)
	c.mu.Unlock()
}

func (c *seqCollector) snapshot() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

// missing returns the numbers below n never received.
func (c *seqCollector) missing(n int) []int {
	have := map[int]bool{}
	for _, v := range c.snapshot() {
		have[v] = true
	}
	var out []int
	for i := range n {
		if !have[i] {
			out = append(out, i)
		}
	}
	return out
}

// waitAll waits until every number below n was received, or fails.
func (c *seqCollector) waitAll(t *testing.T, n int, timeout time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for len(c.missing(n)) > 0 {
		if time.Now().After(deadline) {
			m := c.missing(n)
			t.Fatalf("%s: %d of %d messages never arrived (first missing %v)", what, len(m), n, m[:min(len(m), 10)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// inOrder fails unless the first arrival of each number is in ascending
// order (one MQTT topic: order per topic).
func (c *seqCollector) inOrder(t *testing.T, what string) {
	t.Helper()
	seen := map[int]bool{}
	last := -1
	for _, v := range c.snapshot() {
		if seen[v] {
			continue // a redelivery (DUP): at-least-once
		}
		seen[v] = true
		if v < last {
			t.Fatalf("%s: %d arrived after %d: order per topic broken", what, v, last)
		}
		last = v
	}
}

// TestOneBrokerSubscriberOnAnotherInstance: a clean QoS 1 subscriber on A
// receives, in order, all of 100 QoS 1 messages published on B.
func TestOneBrokerSubscriberOnAnotherInstance(t *testing.T) {
	in := threeInstances(t)
	a, b := in[0], in[1]
	topic := "onebroker/" + randHex(4) + "/t"
	col := &seqCollector{}
	sub := connectPaho(t, a.MQTTAddr(), "ob-sub-"+randHex(4), func(o *pahov3.ClientOptions) { o.SetOrderMatters(true) })
	if tok := sub.Subscribe(topic, 1, func(_ pahov3.Client, m pahov3.Message) { col.add(m.Payload()) }); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	pub := connectPaho(t, b.MQTTAddr(), "ob-pub-"+randHex(4))
	for i := range 100 {
		publishQoS1(t, pub, topic, strconv.Itoa(i), false)
	}
	col.waitAll(t, 100, 20*time.Second, "the subscriber on A, publisher on B")
	col.inOrder(t, "the subscriber on A")
}

// TestOneBrokerSessionPublisherMoves: a persistent session connected on A
// and subscribed; its publisher sends 0-49 through B, then 50-99 through A
// (a load balancer moves it). The session acknowledges what arrives live,
// goes, and resumes on C: every message has arrived, live or on the
// resume. Before, A's acknowledgements of 50-99 moved the session's
// position past 0-49, which A never delivered: lost for good.
func TestOneBrokerSessionPublisherMoves(t *testing.T) {
	for _, qos := range []byte{1, 2} {
		t.Run(fmt.Sprintf("qos%d", qos), func(t *testing.T) {
			in := threeInstances(t)
			a, b, c := in[0], in[1], in[2]
			topic := "onebroker/" + randHex(4) + "/s"
			id := "ob-sess-" + randHex(4)
			col := &seqCollector{}
			handler := func(_ pahov3.Client, m pahov3.Message) { col.add(m.Payload()) }
			persistent := func(o *pahov3.ClientOptions) {
				o.SetCleanSession(false).SetOrderMatters(true).SetDefaultPublishHandler(handler)
			}
			sub := connectPaho(t, a.MQTTAddr(), id, persistent)
			if tok := sub.Subscribe(topic, qos, handler); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
				t.Fatalf("subscribe: %v", tok.Error())
			}
			pubB := connectPaho(t, b.MQTTAddr(), "ob-pubB-"+randHex(4))
			pubA := connectPaho(t, a.MQTTAddr(), "ob-pubA-"+randHex(4))
			publish := func(p pahov3.Client, i int) {
				if tok := p.Publish(topic, qos, false, strconv.Itoa(i)); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
					t.Fatalf("publish %d: %v", i, tok.Error())
				}
			}
			for i := range 50 {
				publish(pubB, i)
			}
			for i := 50; i < 100; i++ {
				publish(pubA, i)
			}
			// Live, A delivers 50-99 at once; whatever it has delivered
			// the client acknowledges (paho acks as it receives).
			waitFor(t, 10*time.Second, "the live deliveries of A's publishes", func() bool {
				return slices.Contains(col.snapshot(), 99)
			})
			waitAcked(t, a, id)
			sub.Disconnect(100)
			waitFor(t, 10*time.Second, "the session offline", func() bool { return sessionOffline(a, id) })
			live := len(col.snapshot())
			connectPaho(t, c.MQTTAddr(), id, persistent)
			col.waitAll(t, 100, 20*time.Second, fmt.Sprintf("live on A (%d arrivals) and after the resume on C", live))
		})
	}
}

// TestOneBrokerV5SessionPublisherMoves is the same with MQTT 5 clients
// (eclipse/paho.golang), QoS 1.
func TestOneBrokerV5SessionPublisherMoves(t *testing.T) {
	in := threeInstances(t)
	a, b, c := in[0], in[1], in[2]
	topic := "onebroker/" + randHex(4) + "/v5"
	id := "ob-v5-" + randHex(4)
	col := &seqCollector{}
	opts := func(cc *paho.ClientConfig, cp *paho.Connect) {
		cp.CleanStart = false
		cp.Properties = &paho.ConnectProperties{SessionExpiryInterval: ptr(uint32(300))}
		cc.OnPublishReceived = []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			col.add(pr.Packet.Payload)
			return true, nil
		}}
	}
	sub := connectV5(t, a.MQTTAddr(), id, opts)
	mustSubscribe(t, sub, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}})
	pubB := connectV5(t, b.MQTTAddr(), "ob-v5pubB-"+randHex(4))
	pubA := connectV5(t, a.MQTTAddr(), "ob-v5pubA-"+randHex(4))
	for i := range 100 {
		p := pubB
		if i >= 50 {
			p = pubA
		}
		mustPublish(t, p, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte(strconv.Itoa(i))})
	}
	waitFor(t, 10*time.Second, "the live deliveries of A's publishes", func() bool {
		return slices.Contains(col.snapshot(), 99)
	})
	waitAcked(t, a, id)
	_ = sub.Disconnect(&paho.Disconnect{})
	waitFor(t, 10*time.Second, "the session offline", func() bool { return sessionOffline(a, id) })
	live := len(col.snapshot())
	_, ca := dialV5(t, c.MQTTAddr(), paho.ClientConfig{ClientID: id, OnPublishReceived: []func(paho.PublishReceived) (bool, error){
		func(pr paho.PublishReceived) (bool, error) { col.add(pr.Packet.Payload); return true, nil }}},
		&paho.Connect{ClientID: id, CleanStart: false, KeepAlive: 30,
			Properties: &paho.ConnectProperties{SessionExpiryInterval: ptr(uint32(300))}})
	if !ca.SessionPresent {
		t.Fatal("resume on C: Session Present 0, want 1")
	}
	col.waitAll(t, 100, 20*time.Second, fmt.Sprintf("live on A (%d arrivals) and after the resume on C", live))
}

// TestOneBrokerQoS2AcrossInstances: a QoS 2 publish on B reaches a QoS 2
// subscriber on A at QoS 2, live and queued for a persistent session that
// resumes on C: a delivery's QoS is the lower of the publisher's and the
// subscription's [MQTT-3.8.4-8] and never lowered on the way. Before, a
// record read back from Kafka went out at reverse.topics' default QoS 1
// (the record's mqtt.qos header could only lower it).
func TestOneBrokerQoS2AcrossInstances(t *testing.T) {
	in := threeInstances(t)
	a, b, c := in[0], in[1], in[2]
	topic := "onebroker/" + randHex(4) + "/q2"
	id := "ob-q2-" + randHex(4)
	var mu sync.Mutex
	qos := map[string]byte{}
	handler := func(_ pahov3.Client, m pahov3.Message) {
		mu.Lock()
		qos[string(m.Payload())] = m.Qos()
		mu.Unlock()
	}
	persistent := func(o *pahov3.ClientOptions) {
		o.SetCleanSession(false).SetOrderMatters(true).SetDefaultPublishHandler(handler)
	}
	sub := connectPaho(t, a.MQTTAddr(), id, persistent)
	if tok := sub.Subscribe(topic, 2, handler); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	pub := connectPaho(t, b.MQTTAddr(), "ob-q2pub-"+randHex(4))
	send := func(payload string) {
		if tok := pub.Publish(topic, 2, false, payload); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %s: %v", payload, tok.Error())
		}
	}
	got := func(payload string) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); _, ok := qos[payload]; return ok }
	}
	send("live")
	waitFor(t, 20*time.Second, "the live message on A", got("live"))
	waitAcked(t, a, id)
	sub.Disconnect(100)
	waitFor(t, 10*time.Second, "the session offline", func() bool { return sessionOffline(a, id) })
	send("queued")
	connectPaho(t, c.MQTTAddr(), id, persistent)
	waitFor(t, 20*time.Second, "the queued message on C", got("queued"))
	mu.Lock()
	defer mu.Unlock()
	for _, p := range []string{"live", "queued"} {
		if qos[p] != 2 {
			t.Errorf("the %s message arrived at QoS %d, want 2 (published and subscribed at QoS 2)", p, qos[p])
		}
	}
}
