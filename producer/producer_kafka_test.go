package producer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
	"github.com/ferry-bridge/ferry/internal/testhelp"
)

// Finding 1 against the real Kafka: a topic with max.message.bytes=2000;
// one 3,000-byte record (larger than kafka.max_batch_bytes, so alone in its
// chunk) among small ones, all taken in one flush. Only the large record is
// refused; every other one, of its key and of others, is in Kafka in order.
func TestProducerOversizeRealKafka(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.Topic(t, "oversize")
	kafkatest.CreateTopic(t, brokers, topic, 1, map[string]string{"max.message.bytes": "2000"})
	tr, err := NewTransport("test-"+testhelp.RandHex(3), nil, SASL{})
	if err != nil {
		t.Fatal(err)
	}
	h := newProdHarnessRT(t, tr, kafkatest.Addrs(brokers), 64, func(c *Config) {
		c.MaxBatchBytes = 1024
		c.AckTimeout = 10 * time.Second
	})
	var outs []outcome
	var want []string
	for i := range 12 {
		v, key := fmt.Sprintf("small-%d", i), fmt.Sprintf("k%d", i%3)
		if i == 4 {
			v, key = strings.Repeat("x", 3000), "k1"
		} else {
			want = append(want, v)
		}
		r, o := h.rec(topic, key, v, 1, 10*time.Second)
		h.push(r)
		outs = append(outs, o)
	}
	h.start()
	for i, o := range outs {
		err, _ := o.wait(t, 20*time.Second)
		switch {
		case i == 4 && !errors.Is(err, ErrTooLarge):
			t.Fatalf("oversize record: err = %v, want ErrTooLarge", err)
		case i != 4 && err != nil:
			t.Fatalf("innocent record %d refused: %v", i, err)
		}
	}
	msgs := kafkatest.ConsumeAll(t, brokers, topic, len(want), 20*time.Second)
	got := make([]string, len(msgs))
	for i, m := range msgs {
		got[i] = string(m.Value)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Kafka has %q, want %q", got, want)
	}
}

// Finding 4 against the real Kafka: topicManager.refresh makes kafka-go's
// transport re-read its metadata at once. A topic created through another
// client is unknown to our transport's cache (TTL one hour here) until the
// refresh, and known right after it.
func TestMetadataRefreshRealKafka(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	tr, err := NewTransport("test-"+testhelp.RandHex(3), nil, SASL{})
	if err != nil {
		t.Fatal(err)
	}
	tr.MetadataTTL = time.Hour
	client := &kafka.Client{Addr: kafka.TCP(kafkatest.Addrs(brokers)...), Transport: tr, Timeout: 10 * time.Second}
	defer kafkatest.CloseClient(client)
	tm := newTopicManager(testConfig(), testhelp.Logger(t), client, testMetrics())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Warm the cache, then create a topic behind its back.
	if _, missing := tm.lookup(ctx, []string{"__ferry_absent_" + testhelp.RandHex(4)}); len(missing) != 1 {
		t.Fatal("warm-up lookup")
	}
	// The cache may see a new topic by itself when its first metadata fetch
	// was late: then try another topic (three at most) instead of proving
	// nothing.
	var topic string
	for attempt := 0; ; attempt++ {
		topic = kafkatest.Topic(t, "refresh")
		kafkatest.CreateTopic(t, brokers, topic, 1, nil)
		if found, _ := tm.lookup(ctx, []string{topic}); len(found) == 0 {
			break
		}
		if attempt == 2 {
			t.Fatal("the transport's cache saw each of 3 topics created behind its back before any refresh")
		}
	}
	if err := tm.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	found, missing := tm.lookup(ctx, []string{topic})
	if len(missing) != 0 || len(found) != 1 || found[0].err != nil || len(found[0].leaders) != 1 || found[0].leaders[0] < 0 {
		t.Fatalf("after refresh: found %+v, missing %v", found, missing)
	}
}
