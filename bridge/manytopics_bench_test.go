package bridge

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkManyTopics measures forward throughput (QoS 1, 12 B, acked after
// Kafka acks=all) with 1, 100 and 1,000 Kafka topics side by side in one
// run: the same 4 raw MQTT connections with pre-encoded PUBLISH packets, 256
// in flight each, spread their messages round-robin over the topics. The
// issue's targets: 100 topics >= 0.8x and 1,000 topics >= 0.6x of one topic.
// Needs FERRY_TEST_KAFKA (a real Kafka). The topics have fixed names
// (/bench/many/N -> _bench_many_N), so repeated runs reuse them instead of
// creating 1,000 more each time; they are created (and their leaders
// learned) before the timing starts.
//
//	FERRY_TEST_KAFKA=$(scripts/kafka.sh up | tail -1) go test -run '^$' -bench 'ManyTopics' -benchtime 400000x -count 2 ./bridge/
func BenchmarkManyTopics(pb *testing.B) {
	brokers := manyTopicsKafka(pb)
	bridges := map[int]*Bridge{}
	for _, topics := range []int{1, 100, 1000} {
		pb.Run(fmt.Sprintf("topics=%d", topics), func(b *testing.B) {
			br := bridges[topics]
			if br == nil {
				// One bridge per topic count, kept across the benchmark's
				// rounds (b.N = 1, then the real N).
				br = startBridge(pb, testConfig(brokers))
				bridges[topics] = br
				warmTopics(b, br.MQTTAddr(), topics)
				// An untimed pass of the same load: on a fresh Kafka the
				// first produce requests to hundreds of new partitions took
				// more than the 5 s ack timeout (its clients were refused).
				var err error
				for attempt := range 12 {
					if _, err = runManyTopics(br.MQTTAddr(), topics, 4, 256, 40000, func() {}); err == nil {
						b.Logf("warm-up pass done after %d refused", attempt)
						break
					}
				}
				if err != nil {
					b.Fatalf("warm-up pass: %v", err)
				}
			}
			benchManyTopics(b, br.MQTTAddr(), topics, 4, 256)
		})
	}
}

func manyTopic(i int) string { return fmt.Sprintf("/bench/many/%d", i) }

// manyKafkaTopic is the Kafka topic Ferry maps manyTopic(i) to.
func manyKafkaTopic(i int) string { return strings.ReplaceAll(manyTopic(i), "/", "_") }

// manyTopicsKafka returns the real Kafka of FERRY_TEST_KAFKA with the
// benchmarks' 1,000 topics created and settled, or skips the benchmark.
func manyTopicsKafka(b *testing.B) string {
	brokers := os.Getenv("FERRY_TEST_KAFKA")
	if brokers == "" {
		b.Skip("FERRY_TEST_KAFKA not set: this benchmark needs a real Kafka")
	}
	createManyTopics(b, brokers, 1000)
	return brokers
}

// createManyTopics creates the benchmark's topics (those missing) as Ferry
// would, one partition, LogAppendTime.
func createManyTopics(b *testing.B, brokers string, n int) {
	b.Helper()
	client := &kafka.Client{Addr: kafka.TCP(strings.Split(brokers, ",")...), Timeout: 60 * time.Second}
	var req []kafka.TopicConfig
	for i := range n {
		req = append(req, kafka.TopicConfig{Topic: manyKafkaTopic(i), NumPartitions: 1, ReplicationFactor: 1,
			ConfigEntries: []kafka.ConfigEntry{{ConfigName: "message.timestamp.type", ConfigValue: "LogAppendTime"}}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: req})
	if err != nil {
		b.Fatalf("create topics: %v", err)
	}
	var names []string
	for t, err := range res.Errors {
		if err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
			b.Fatalf("create topic %s: %v", t, err)
		}
		names = append(names, t)
	}
	// A fresh Kafka takes seconds to bring a thousand new partitions online
	// (NOT_LEADER, UNKNOWN_TOPIC_OR_PARTITION meanwhile), longer than the
	// bridge's ack timeout: write one record to each with a patient client
	// first, so that the bridge's warm-up and the timing see a settled Kafka.
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.RecordDeliveryTimeout(2*time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	pctx, pcancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer pcancel()
	var recs []*kgo.Record
	for _, t := range names {
		recs = append(recs, &kgo.Record{Topic: t, Value: []byte("settle")})
	}
	if err := cl.ProduceSync(pctx, recs...).FirstErr(); err != nil {
		b.Fatalf("first write to the %d topics: %v", len(names), err)
	}
}

// warmTopics publishes one QoS 1 message per topic and waits for the acks:
// the topics have been written to and the bridge knows their leaders. The
// first write to a thousand fresh partitions can outlast the ack timeout on
// a busy machine: a group that is refused (a disconnect, MQTT 3.1.1) is sent
// again.
func warmTopics(b *testing.B, addr string, n int) {
	b.Helper()
	const group = 50
	for lo := 0; lo < n; lo += group {
		hi := min(lo+group, n)
		var err error
		for attempt := 0; attempt < 5; attempt++ {
			if err = warmGroup(addr, lo, hi); err == nil {
				break
			}
		}
		if err != nil {
			b.Fatalf("warm-up of topics %d..%d: %v", lo, hi-1, err)
		}
	}
}

func warmGroup(addr string, lo, hi int) error {
	c, err := dialLight(&net.Dialer{Timeout: 5 * time.Second}, addr, "warm-"+randHex(4), 4, 60)
	if err != nil {
		return err
	}
	defer c.close()
	for i := lo; i < hi; i++ {
		if err := c.appendPublish(4, manyTopic(i), 1, uint16(i-lo+1), []byte("warm")); err != nil {
			return err
		}
	}
	_ = c.conn.SetDeadline(time.Now().Add(60 * time.Second))
	if err := c.flush(); err != nil {
		return err
	}
	for i := lo; i < hi; i++ {
		typ, _, err := c.read()
		if err != nil || typ>>4 != packets.Puback {
			return fmt.Errorf("type %#x, %v", typ, err)
		}
	}
	return nil
}

// benchManyTopics times b.N publishes of runManyTopics.
func benchManyTopics(b *testing.B, addr string, topics, conns, window int) {
	b.StopTimer()
	elapsed, err := runManyTopics(addr, topics, conns, window, b.N, b.StartTimer)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N/conns*conns)/elapsed.Seconds(), "msgs/s")
}

// runManyTopics sends n QoS 1 publishes over conns connections, window in
// flight each; connection c sends message j to topic (c + conns*j) % topics.
// started is called once the connections are set up, when timing begins.
func runManyTopics(addr string, topics, conns, window, n int, started func()) (time.Duration, error) {
	const ring = 4096 // distinct packet ids per connection, > window
	payload := []byte("0123456789ab")
	type conn struct {
		lc   *lightClient
		pkts [][]byte // pre-encoded PUBLISH packets, packet ids 1..ring
	}
	cs := make([]conn, conns)
	for ci := range cs {
		lc, err := dialLight(&net.Dialer{Timeout: 5 * time.Second}, addr, fmt.Sprintf("many-%d-%s", ci, randHex(3)), 4, 60)
		if err != nil {
			return 0, err
		}
		defer lc.close()
		cs[ci].lc = lc
		for j := range ring {
			if err := lc.appendPublish(4, manyTopic((ci+conns*j)%topics), 1, uint16(j+1), payload); err != nil {
				return 0, err
			}
			cs[ci].pkts = append(cs[ci].pkts, append([]byte(nil), lc.out.Bytes()...))
			lc.out.Reset()
		}
	}
	per := n / conns
	started()
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstErr atomic.Value
	for ci := range cs {
		c := &cs[ci]
		credits := make(chan struct{}, window)
		for range window {
			credits <- struct{}{}
		}
		wg.Add(2)
		// dead: the reader stopped, so the writer must not wait for credits.
		dead := make(chan struct{})
		go func() { // reader: one credit back per PUBACK
			defer wg.Done()
			defer close(dead)
			for range per {
				typ, body, err := c.lc.read()
				if err != nil || typ>>4 != packets.Puback || (len(body) > 2 && body[2] >= 0x80) {
					if failed.Add(1) == 1 {
						firstErr.Store(fmt.Sprintf("packet type %#x body %x err %v", typ, body, err))
					}
					return
				}
				credits <- struct{}{}
			}
		}()
		go func() { // writer: as many packets as credits allow, one write
			defer wg.Done()
			buf := make([]byte, 0, window*len(c.pkts[0]))
			for sent := 0; sent < per; {
				select {
				case <-credits:
				case <-dead:
					return
				}
				buf = append(buf[:0], c.pkts[sent%ring]...)
				sent++
				for more := true; more && sent < per; {
					select {
					case <-credits:
						buf = append(buf, c.pkts[sent%ring]...)
						sent++
					default:
						more = false
					}
				}
				if _, err := c.lc.conn.Write(buf); err != nil {
					failed.Add(1)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if failed.Load() > 0 {
		return elapsed, fmt.Errorf("%d connections failed; the first: %v", failed.Load(), firstErr.Load())
	}
	return elapsed, nil
}

// BenchmarkManyTopicsKgo is the same shape without MQTT and without Ferry:
// a franz-go producer (acks=all, no linger) with 1,024 records in flight,
// the 4 x 256 of BenchmarkManyTopics, writing 12 B records round-robin over
// the same 1, 100 and 1,000 topics. It is the ceiling a producer can reach
// when each partition gets about one record per request: run it beside
// BenchmarkManyTopics and compare the ratios.
//
//	FERRY_TEST_KAFKA=$(scripts/kafka.sh up | tail -1) go test -run '^$' -bench 'ManyTopics' -benchtime 400000x -count 2 ./bridge/
func BenchmarkManyTopicsKgo(pb *testing.B) {
	brokers := manyTopicsKafka(pb)
	for _, topics := range []int{1, 100, 1000} {
		pb.Run(fmt.Sprintf("topics=%d", topics), func(b *testing.B) {
			cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.ProducerLinger(0),
				kgo.MaxBufferedRecords(1024), kgo.RecordDeliveryTimeout(time.Minute))
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			names := make([]string, topics)
			for i := range names {
				names[i] = manyKafkaTopic(i)
			}
			payload := []byte("0123456789ab")
			var failed atomic.Int64
			var wg sync.WaitGroup
			done := func(_ *kgo.Record, err error) {
				if err != nil {
					failed.Add(1)
				}
				wg.Done()
			}
			b.ResetTimer()
			start := time.Now()
			wg.Add(b.N)
			for i := range b.N {
				// Produce blocks while 1,024 records are buffered or in flight.
				cl.Produce(context.Background(), &kgo.Record{Topic: names[i%topics], Value: payload}, done)
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d records failed", n)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
		})
	}
}
