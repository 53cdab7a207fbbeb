package bridge

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	pahov3 "github.com/eclipse/paho.mqtt.golang"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
	"github.com/ferry-bridge/ferry/topicmap"
)

// BenchmarkPersistentSubscribe: SUBSCRIBE -> SUBACK of a persistent session,
// which waits for the sessions topic's write (acks=all). Reports p50 and
// p99 in ms over b.N subscriptions, one at a time.
//
//	FERRY_TEST_KAFKA=127.0.0.1:9092 go test -run '^$' -bench BenchmarkPersistentSubscribe -benchtime 2000x ./bridge/
func BenchmarkPersistentSubscribe(b *testing.B) {
	br := startBridge(b, testConfig(kafkatest.Brokers(b)))
	c := connectPaho(b, br.MQTTAddr(), "subbench-"+randHex(4), func(o *pahov3.ClientOptions) { o.SetCleanSession(false) })
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		if tok := c.Subscribe(fmt.Sprintf("bench/sub/%d", i), 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			b.Fatalf("subscribe %d: %v", i, tok.Error())
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	ms := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / 1e6 }
	b.ReportMetric(ms(0.5), "p50-ms")
	b.ReportMetric(ms(0.99), "p99-ms")
}

// BenchmarkOfflineQueue: FERRY_BENCH_QUEUE records (default 1,000,000,
// 12 B) arrive for an offline persistent session, produced straight to the
// Kafka topic its subscription maps to. Reports the bridge's heap growth
// while they wait (the queue is a position: no copy in memory) and the
// drain rate when the session resumes (a paho client acknowledging each,
// replay window 64).
//
//	FERRY_TEST_KAFKA=127.0.0.1:9092 go test -run '^$' -bench BenchmarkOfflineQueue -benchtime 1x -timeout 20m ./bridge/
func BenchmarkOfflineQueue(b *testing.B) {
	brokers := kafkatest.Brokers(b)
	n := 1000000
	if v, err := strconv.Atoi(os.Getenv("FERRY_BENCH_QUEUE")); err == nil && v > 0 {
		n = v
	}
	br := startBridge(b, testConfig(brokers))
	id := "qbench" + randHex(4)
	topic := "bench/" + id + "/q"
	kt, err := topicmap.EncodeTopic(topic)
	if err != nil {
		b.Fatal(err)
	}
	kafkatest.CreateTopic(b, brokers, kt, 1, nil)
	var got atomic.Int64
	opts := func(o *pahov3.ClientOptions) {
		o.SetCleanSession(false).SetOrderMatters(false).
			SetDefaultPublishHandler(func(pahov3.Client, pahov3.Message) { got.Add(1) })
	}
	sub := connectPaho(b, br.MQTTAddr(), id, opts)
	if tok := sub.Subscribe(topic, 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		b.Fatalf("subscribe: %v", tok.Error())
	}
	sub.Disconnect(100)
	heap0 := heapInUse()

	p := kgoProducer(b, brokers)
	payload := []byte("0123456789ab")
	const chunk = 10000
	for i := 0; i < n; i += chunk {
		recs := make([]*kgo.Record, 0, chunk)
		for j := i; j < min(i+chunk, n); j++ {
			recs = append(recs, &kgo.Record{Topic: kt, Value: payload})
		}
		produceAll(b, p, recs)
	}
	heap1 := heapInUse()

	b.ResetTimer()
	start := time.Now()
	connectPaho(b, br.MQTTAddr(), id, opts)
	deadline := time.Now().Add(15 * time.Minute)
	for got.Load() < int64(n) {
		if time.Now().After(deadline) {
			b.Fatalf("drained %d of %d in 15 min", got.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(heap1-heap0)/(1<<20), "queued-heap-MiB")
	b.ReportMetric(float64(n)/took.Seconds(), "drain-msgs/s")
	b.Logf("%d queued for an offline session: heap %+.1f MiB while queued; drained in %s (%.0f msg/s)",
		n, float64(heap1-heap0)/(1<<20), took.Round(time.Millisecond), float64(n)/took.Seconds())
}

func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}
