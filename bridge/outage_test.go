package bridge

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	pahov3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
)

// TestKafkaUnreachableAtStart: the bridge starts while nothing listens at
// its Kafka address. The MQTT side works; a v5 QoS 1 publish gets reason
// 0x80 within the ack timeout; QoS 0 is buffered up to capacity and the
// rest is dropped and counted; when Kafka appears at that address the
// buffered messages and new QoS 1 publishes flow without a restart.
func TestKafkaUnreachableAtStart(t *testing.T) {
	addr := freeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	kb := kafkatest.NewBroker(t, port)

	cfg := testConfig(addr)
	cfg.Kafka.AckTimeout = 2 * time.Second
	cfg.Kafka.MaxBatch = 16 // a partition queue holds at most 4 x 16 records
	cfg.Ring.Capacity = 64
	b := startBridge(t, cfg)

	// QoS 1 from an MQTT v5 client: a negative PUBACK, within the timeout.
	topic1 := uniqueTopic("unreach1")
	v5 := connectV5(t, b.MQTTAddr(), "unreach-v5")
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	res, err := v5.Publish(ctx, &paho.Publish{Topic: topic1, QoS: 1, Payload: []byte("early")})
	cancel()
	took := time.Since(start)
	if err == nil || res == nil {
		// paho.golang returns the PUBACK with an error for reason >= 0x80.
		if res == nil || res.ReasonCode < 0x80 {
			t.Fatalf("v5 QoS1 publish with Kafka unreachable: res=%v err=%v, want reason >= 0x80", res, err)
		}
	}
	if res != nil && res.ReasonCode != 0x80 {
		t.Fatalf("reason code = %#x, want 0x80", res.ReasonCode)
	}
	// Nothing but the 2 s ack timeout refuses it before paho's 10 s; the
	// slack is for a loaded machine under -race, not a latency target.
	if took > cfg.Kafka.AckTimeout+5*time.Second {
		t.Fatalf("negative ack took %s, want within the ack timeout %s", took, cfg.Kafka.AckTimeout)
	}
	t.Logf("v5 QoS1 publish refused with reason 0x80 after %s (ack timeout %s)", took.Round(time.Millisecond), cfg.Kafka.AckTimeout)

	// QoS 0 into a full pipeline: some buffered, the rest dropped and counted.
	topic0 := uniqueTopic("unreach0")
	c := connectPaho(t, b.MQTTAddr(), "unreach-q0")
	const sent = 1000
	for i := range sent {
		c.Publish(topic0, 0, false, strconv.Itoa(i)).Wait()
	}
	// The received counter moves when the hook starts on a publish, the drop
	// counter when it ends: wait until all are received and the drop count
	// has stopped moving (nothing drains while Kafka is away).
	dropped := -1.0
	waitFor(t, 10*time.Second, "QoS0 publishes counted", func() bool {
		if metricValue(t, b, "ferry_mqtt_publishes_received_total", map[string]string{"qos": "0"}) != sent {
			return false
		}
		prev := dropped
		dropped = metricValue(t, b, "ferry_dropped_total", map[string]string{"reason": "ring_full"})
		if prev != dropped {
			time.Sleep(50 * time.Millisecond)
			return false
		}
		return true
	})
	if dropped <= 0 || dropped >= sent {
		t.Fatalf("dropped %v of %d QoS0 messages, want some but not all (ring 64 + partition queue)", dropped, sent)
	}
	buffered := sent - int(dropped)
	t.Logf("QoS0 while Kafka unreachable: sent %d, buffered %d, dropped and counted %.0f", sent, buffered, dropped)

	// Kafka appears: everything buffered flows, and QoS 1 works again.
	kb.Up()
	up := time.Now()
	// A device retries a refused publish; it must succeed once the bridge
	// has found Kafka (kafka-go refreshes its metadata every 3 s).
	refused := 0
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err = v5.Publish(ctx, &paho.Publish{Topic: topic1, QoS: 1, Payload: []byte("late")})
		cancel()
		if err == nil && res.ReasonCode == 0 {
			break
		}
		refused++
		if time.Since(up) > 30*time.Second {
			t.Fatalf("QoS1 still refused 30s after Kafka appeared: res=%v err=%v", res, err)
		}
	}
	t.Logf("first QoS1 publish acked %s after Kafka appeared (%d refused meanwhile)", time.Since(up).Round(time.Millisecond), refused)
	msgs := readTopic(t, []string{addr}, kafkaName(t, topic0), buffered, 30*time.Second)
	for i, m := range msgs[1:] {
		prev, _ := strconv.Atoi(string(msgs[i].Value))
		cur, _ := strconv.Atoi(string(m.Value))
		if cur <= prev {
			t.Fatalf("QoS0 records out of order: %d after %d", cur, prev)
		}
	}
	if n := kafkatest.RecordCount(t, addr, kafkaName(t, topic0)); n != int64(buffered) {
		t.Fatalf("Kafka holds %d QoS0 records, want exactly the %d buffered", n, buffered)
	}
	if got := readTopic(t, []string{addr}, kafkaName(t, topic1), 1, 10*time.Second); string(got[0].Value) != "late" {
		t.Fatalf("topic1 first record %q, want only the acked 'late' (the refused 'early' must not be acked)", got[0].Value)
	}
}

// TestRingFullKafkaPaused: Kafka freezes (SIGSTOP) for 2 s under a small
// ring. QoS 1 publishers are held back (no ack, no loss), QoS 0 overflow is
// dropped and counted, memory stays bounded.
func TestRingFullKafkaPaused(t *testing.T) {
	kb := kafkatest.StartBroker(t)
	cfg := testConfig(kb.Addr)
	cfg.Kafka.AckTimeout = 10 * time.Second
	cfg.Kafka.MaxBatch = 16
	cfg.Ring.Capacity = 16
	b := startBridge(t, cfg)

	q1 := uniqueTopic("paused1")
	q0 := uniqueTopic("paused0")
	pub1 := connectPaho(t, b.MQTTAddr(), "paused-q1")
	pub0 := connectPaho(t, b.MQTTAddr(), "paused-q0")
	// Warm up both topics so that they exist before the pause.
	for _, tp := range []string{q1, q0} {
		if tok := pub1.Publish(tp, 1, false, "-1"); !tok.WaitTimeout(20*time.Second) || tok.Error() != nil {
			t.Fatalf("warm-up publish: %v", tok.Error())
		}
	}
	rssBefore := vmRSS(t) >> 10
	kb.Pause()
	paused := time.Now()
	const n1, n0 = 2000, 5000
	var wg sync.WaitGroup
	toks := make([]pahov3.Token, 0, n1)
	var mu sync.Mutex
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := range n1 {
			tok := pub1.Publish(q1, 1, false, strconv.Itoa(i))
			mu.Lock()
			toks = append(toks, tok)
			mu.Unlock()
		}
	}()
	go func() {
		defer wg.Done()
		for i := range n0 {
			pub0.Publish(q0, 0, false, strconv.Itoa(i)).Wait()
		}
	}()
	// While Kafka is frozen nothing may be acknowledged.
	time.Sleep(2 * time.Second)
	mu.Lock()
	ackedDuringPause := 0
	var ackedIdx []int // which ones (a diagnosis: the first few would mean a late freeze)
	for i, tok := range toks {
		select {
		case <-tok.Done():
			if tok.Error() == nil {
				ackedDuringPause++
				if len(ackedIdx) < 10 {
					ackedIdx = append(ackedIdx, i)
				}
			}
		default:
		}
	}
	mu.Unlock()
	rssPaused := vmRSS(t) >> 10
	// The memory bound: while Kafka is frozen the producer holds at most
	// 16 x kafka.max_batch records (README), and the rest waits in the
	// 16-slot ring or is dropped (QoS 0) or held back in the clients (QoS 1,
	// whose hook calls wait for ring room).
	held := metricValue(t, b, "ferry_kafka_producer_records_held", nil)
	bound := float64(16 * cfg.Kafka.MaxBatch)
	ring := metricValue(t, b, "ferry_ring_depth", nil)
	kb.Resume()
	t.Logf("kafka paused for %s", time.Since(paused).Round(time.Millisecond))
	wg.Wait()
	if ackedDuringPause != 0 {
		t.Fatalf("%d QoS1 publishes were acknowledged while Kafka was frozen (the first: %v)", ackedDuringPause, ackedIdx)
	}
	for i, tok := range toks {
		if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
			t.Fatalf("QoS1 message %d not acked after Kafka resumed: %v", i, tok.Error())
		}
	}
	msgs := readTopic(t, []string{kb.Addr}, kafkaName(t, q1), n1+1, 30*time.Second)
	for i, m := range msgs[1:] {
		if string(m.Value) != strconv.Itoa(i) {
			t.Fatalf("QoS1 record %d = %q: lost or reordered", i, m.Value)
		}
	}
	dropped := metricValue(t, b, "ferry_dropped_total", map[string]string{"reason": "ring_full"})
	waitFor(t, 20*time.Second, "QoS0 survivors in Kafka", func() bool {
		return kafkatest.RecordCount(t, kb.Addr, kafkaName(t, q0)) == int64(n0-int(dropped)+1)
	})
	t.Logf("ring 16, kafka frozen 2s: QoS1 %d held back and all acked after resume (0 during the pause); QoS0 %d sent, %.0f dropped and counted, %d in Kafka; RSS %d KiB before, %d KiB while frozen",
		n1, n0, dropped, n0-int(dropped), rssBefore, rssPaused)
	if dropped == 0 {
		t.Fatal("no QoS0 drop counted with a 16-slot ring and Kafka frozen")
	}
	if held > bound || ring > float64(cfg.Ring.Capacity) {
		t.Fatalf("while Kafka was frozen the producer held %.0f records (bound %.0f) and the ring %.0f (capacity %d)", held, bound, ring, cfg.Ring.Capacity)
	}
	// Every QoS 0 message not dropped was held in memory during the pause
	// (or sent before it): at most the ring, the producer's bound and one
	// batch taken from the ring waiting for room.
	if kept := float64(n0) - dropped; kept > float64(cfg.Ring.Capacity+cfg.Kafka.MaxBatch)+bound {
		t.Fatalf("%.0f QoS 0 messages kept while Kafka was frozen: more than the ring, a batch and the producer bound hold", kept)
	}
	t.Logf("frozen: producer held %.0f records (bound %.0f), ring %.0f of %d", held, bound, ring, cfg.Ring.Capacity)
}
