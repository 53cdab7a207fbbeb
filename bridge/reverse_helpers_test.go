package bridge

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
	"github.com/ferry-bridge/ferry/topicmap"
)

// scaled returns full normally and reduced under the race detector.
func scaled(full, race int) int {
	if raceEnabled {
		return race
	}
	return full
}

// revTopic returns a fresh Kafka topic name that the default rule decodes
// ("_ferrytest_<tag><hex>_le" -> "/ferrytest/<tag><hex>/le") and its MQTT topic.
func revTopic(t testing.TB, tag string) (kafkaTopic, mqttTopic string) {
	t.Helper()
	k := "_ferrytest_" + tag + randHex(5) + "_le"
	m, err := topicmap.DecodeTopic(k)
	if err != nil {
		t.Fatalf("DecodeTopic(%q): %v", k, err)
	}
	return k, m
}

// reverseConfig consumes topics from the earliest offset and delivers them
// at QoS 1.
func reverseConfig(brokers string, topics ...string) Config {
	cfg := testConfig(brokers)
	cfg.Reverse.Topics = topics
	cfg.Reverse.StartOffset = "earliest"
	cfg.Reverse.Refresh = 2 * time.Second
	for _, k := range topics {
		cfg.Topics.Reverse = append(cfg.Topics.Reverse, topicmap.ReverseRule{Kafka: k, QoS: topicmap.QoS(1)})
	}
	return cfg
}

// kgoProducer is a franz-go producer with no linger, closed at the end of the test.
func kgoProducer(t testing.TB, brokers string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkatest.Addrs(brokers)...), kgo.ProducerLinger(0),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if err != nil {
		t.Fatalf("kgo producer: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produceAll produces recs and waits for every acknowledgement.
func produceAll(t testing.TB, cl *kgo.Client, recs []*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	var first error
	for _, r := range recs {
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	if first != nil {
		t.Fatalf("produce: %v", first)
	}
}

// seqRecords returns n records to topic with values "key.seq" and keys
// "k<seq%keys>".
func seqRecords(topic string, n, keys int) []*kgo.Record {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		k := i % keys
		recs[i] = &kgo.Record{Topic: topic, Key: []byte("k" + strconv.Itoa(k)), Value: []byte(fmt.Sprintf("%d.%d", k, i))}
	}
	return recs
}

// collector stores received payloads in arrival order.
type collector struct {
	mu   sync.Mutex
	msgs []string
}

func (c *collector) add(p string) {
	c.mu.Lock()
	c.msgs = append(c.msgs, p)
	c.mu.Unlock()
}

func (c *collector) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.msgs)
}

func (c *collector) snapshot() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.msgs)
}

func (c *collector) handler(_ paho.Client, m paho.Message) { c.add(string(m.Payload())) }

// subscribePaho connects an MQTT 3.1.1 client that keeps message order and
// subscribes to topic at QoS 1.
func subscribePaho(t testing.TB, addr, id, topic string, clean bool, c *collector) paho.Client {
	t.Helper()
	cl := connectPaho(t, addr, id, func(o *paho.ClientOptions) {
		o.SetOrderMatters(true).SetCleanSession(clean).SetDefaultPublishHandler(c.handler)
	})
	if topic != "" {
		tok := cl.Subscribe(topic, 1, c.handler)
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("subscribe %s: %v", topic, tok.Error())
		}
	}
	return cl
}

// waitSubscribers polls until topic has n subscribers on b.
func waitSubscribers(t testing.TB, b *Bridge, topic string, n int) {
	t.Helper()
	waitFor(t, 15*time.Second, fmt.Sprintf("%d subscribers on %s", n, topic), func() bool {
		return len(b.server.Topics.Subscribers(topic).Subscriptions) >= n
	})
}

// checkSeqOrder checks that payloads "key.seq" hold seqs 0..n-1 exactly once
// and that each key's seqs arrive in increasing order.
func checkSeqOrder(t testing.TB, who string, payloads []string, n int) {
	t.Helper()
	if len(payloads) != n {
		t.Errorf("%s: got %d messages, want %d", who, len(payloads), n)
	}
	seen := make(map[int]bool, n)
	last := map[string]int{}
	for i, p := range payloads {
		key, s, ok := strings.Cut(p, ".")
		seq, err := strconv.Atoi(s)
		if !ok || err != nil {
			t.Fatalf("%s: message %d: bad payload %q", who, i, p)
		}
		if seen[seq] {
			t.Fatalf("%s: seq %d received twice", who, seq)
		}
		seen[seq] = true
		if prev, ok := last[key]; ok && seq <= prev {
			t.Fatalf("%s: key %s out of order: seq %d after %d", who, key, seq, prev)
		}
		last[key] = seq
	}
	for i := range n {
		if !seen[i] {
			t.Fatalf("%s: seq %d missing", who, i)
		}
	}
}

func metricValue(t testing.TB, b *Bridge, name string, labels map[string]string) float64 {
	t.Helper()
	return counterValue(t, b.reg, name, labels)
}

// subscribeThenGoOffline connects a persistent (CleanSession false) paho
// client as subID, subscribes it to filter at QoS 1, disconnects it and
// waits until the bridge holds its session offline.
func subscribeThenGoOffline(t *testing.T, b *Bridge, subID, filter string, opts func(*paho.ClientOptions)) {
	t.Helper()
	sub := connectPaho(t, b.MQTTAddr(), subID, opts)
	if tok := sub.Subscribe(filter, 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	sub.Disconnect(100)
	waitFor(t, 10*time.Second, "session offline", func() bool {
		return sessionOffline(b, subID)
	})
}
