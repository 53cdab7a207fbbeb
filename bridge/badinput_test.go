package bridge

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
	"github.com/ferry-bridge/ferry/topicmap"
)

// Bad input (issue 9, scenario 6): oversized payloads, invalid topics,
// garbage on the MQTT port and unmappable Kafka records. Each is refused
// clearly and nothing else stalls.

// expectRefusal reads from c until the connection ends and reports what the
// bridge answered: a v5 DISCONNECT's reason code (-1 if none) and whether a
// successful PUBACK arrived.
func expectRefusal(t *testing.T, c *lightClient, within time.Duration) (disconnectCode int, acked bool) {
	t.Helper()
	disconnectCode = -1
	_ = c.conn.SetReadDeadline(time.Now().Add(within))
	for {
		typ, body, err := c.read()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("connection still open %s after the bad publish (no refusal)", within)
			}
			return disconnectCode, acked
		}
		switch typ >> 4 {
		case packets.Disconnect:
			if len(body) > 0 {
				disconnectCode = int(body[0])
			} else {
				disconnectCode = 0
			}
		case packets.Puback:
			if len(body) < 3 || body[2] < 0x80 {
				acked = true
			}
		}
	}
}

// publishAcked publishes seq 0..n-1 (QoS 1, pipelined) from a fresh v3.1.1
// light client and fails the test unless every one is acknowledged.
func publishAcked(t *testing.T, addr, id, topic string, n int) {
	t.Helper()
	c, err := dialLight(&net.Dialer{Timeout: 5 * time.Second}, addr, id, 4, 60)
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	defer c.close()
	for s := range n {
		_ = c.appendPublish(4, topic, 1, uint16(s+1), []byte(strconv.Itoa(s)))
	}
	_ = c.conn.SetDeadline(time.Now().Add(30 * time.Second))
	if err := c.flush(); err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	for i := range n {
		typ, _, err := c.read()
		if err != nil || typ>>4 != packets.Puback {
			t.Fatalf("%s: %d of %d acked, then type %#x err %v", id, i, n, typ, err)
		}
	}
}

func TestBadInputTooLargeForMQTT(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	cfg := testConfig(brokers)
	cfg.MQTT.MaxPacketSize = 4096
	b := startBridge(t, cfg)
	big := bytes.Repeat([]byte("x"), 8192)
	for _, v := range []byte{4, 5} {
		c, err := dialLight(&net.Dialer{Timeout: 5 * time.Second}, b.MQTTAddr(), fmt.Sprintf("big%d-%s", v, randHex(3)), v, 60)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.appendPublish(v, uniqueTopic("big"), 1, 1, big)
		_ = c.flush()
		code, acked := expectRefusal(t, c, 10*time.Second)
		c.close()
		t.Logf("MQTT v%d, 8 KiB publish over mqtt.max_packet_size 4 KiB: connection closed, DISCONNECT reason %#x, acked %v", map[byte]int{4: 3, 5: 5}[v], code, acked)
		if acked {
			t.Errorf("v%d: oversized publish was acknowledged", v)
		}
		// mochi closes the connection on an oversized packet without a v5
		// DISCONNECT: the issue accepts "0x95, or disconnect".
		if v == 5 && code != -1 && code != int(packets.ErrPacketTooLarge.Code) {
			t.Errorf("v5: DISCONNECT reason %#x, want %#x (packet too large) or a plain close", code, packets.ErrPacketTooLarge.Code)
		}
	}
	publishAcked(t, b.MQTTAddr(), "after-big-"+randHex(3), uniqueTopic("afterbig"), 100)
}

// TestBadInputTooLargeForKafka: a topic with max.message.bytes=1000; a
// 2,000-byte publish is refused (v5: DISCONNECT 0x95; v3: disconnect) while
// another client keeps publishing small messages to the same topic, all
// acknowledged and in Kafka.
func TestBadInputTooLargeForKafka(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	ktopic := kafkatest.Topic(t, "maxbytes")
	kafkatest.CreateTopic(t, brokers, ktopic, 1, map[string]string{"max.message.bytes": "1000"})
	prefix := "ferrybig" + randHex(4)
	cfg := testConfig(brokers)
	cfg.Topics.Forward = []topicmap.ForwardRule{{Filter: prefix + "/#", Topic: ktopic, Key: "k"}}
	b := startBridge(t, cfg)

	good := 300
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for round := range 3 {
			publishAcked(t, b.MQTTAddr(), fmt.Sprintf("small%d-%s", round, randHex(3)), prefix+"/small", good/3)
		}
	}()
	// Random bytes: a compressed batch (kafka.compression, lz4 by default)
	// of a repeated byte would fit in 1,000 bytes, and Kafka's limit is on
	// the batch as stored.
	big := make([]byte, 2000)
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	for _, v := range []byte{5, 4, 5} {
		c, err := dialLight(&net.Dialer{Timeout: 5 * time.Second}, b.MQTTAddr(), fmt.Sprintf("kbig%d-%s", v, randHex(3)), v, 60)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.appendPublish(v, prefix+"/big", 1, 1, big)
		_ = c.flush()
		code, acked := expectRefusal(t, c, 15*time.Second)
		c.close()
		t.Logf("MQTT v%d, 2,000-byte publish to a topic with max.message.bytes=1000: DISCONNECT reason %#x, acked %v", map[byte]int{4: 3, 5: 5}[v], code, acked)
		if acked {
			t.Errorf("v%d: a record Kafka refused was acknowledged", v)
		}
		if v == 5 && code != int(packets.ErrPacketTooLarge.Code) {
			t.Errorf("v5: DISCONNECT reason %#x, want %#x", code, packets.ErrPacketTooLarge.Code)
		}
	}
	wg.Wait()
	if n := kafkatest.RecordCount(t, brokers, ktopic); n < int64(good) {
		t.Fatalf("%d records in Kafka, want the %d small ones", n, good)
	}
	t.Logf("too_large nacks: %v", metricValue(t, b, "ferry_mqtt_nacks_total", map[string]string{"reason": "too_large"}))
}

// TestBadInputInvalidTopics: invalid UTF-8 and wildcards in a PUBLISH topic
// are refused (no acknowledgement, connection closed) and the bridge keeps
// serving.
func TestBadInputInvalidTopics(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	b := startBridge(t, testConfig(brokers))
	for _, topic := range []string{"ferrytest/\xff\xfe/x", "ferrytest/+/x", "ferrytest/#", "ferrytest/a\x00b"} {
		for _, v := range []byte{4, 5} {
			c, err := dialLight(&net.Dialer{Timeout: 5 * time.Second}, b.MQTTAddr(), "badtopic-"+randHex(3), v, 60)
			if err != nil {
				t.Fatal(err)
			}
			_ = c.appendPublish(v, topic, 1, 1, []byte("x"))
			_ = c.flush()
			code, acked := expectRefusal(t, c, 10*time.Second)
			c.close()
			t.Logf("v%d publish to %q: connection closed, DISCONNECT reason %#x", map[byte]int{4: 3, 5: 5}[v], topic, code)
			if acked {
				t.Errorf("v%d publish to %q was acknowledged", v, topic)
			}
		}
	}
	publishAcked(t, b.MQTTAddr(), "after-badtopic-"+randHex(3), uniqueTopic("afterbad"), 100)
}

// TestBadInputGarbage: random bytes and truncated packets hit the MQTT port
// (5 s; 30 s with FERRY_SOAK_FULL=1) while a well-behaved client keeps
// publishing QoS 1: the bridge stays up, the client is unaffected (every
// message acknowledged and in Kafka), and no connection is left behind.
func TestBadInputGarbage(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	dur := 5 * time.Second
	if fullSize() {
		dur = 30 * time.Second
	}
	b := startBridge(t, testConfig(brokers))
	g0 := runtime.NumGoroutine()

	// Valid packets to truncate.
	var connect, publish bytes.Buffer
	cp := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 4,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30, ClientIdentifier: "garbage"}}
	_ = cp.ConnectEncode(&connect)
	pp := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: "ferrytest/g", PacketID: 7, Payload: []byte("hello")}
	_ = pp.PublishEncode(&publish)

	stop := make(chan struct{})
	var sent, conns atomic.Int64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			buf := make([]byte, 2048)
			for i := 0; i < 1_000_000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.DialTimeout("tcp", b.MQTTAddr(), 2*time.Second)
				if err != nil {
					continue
				}
				conns.Add(1)
				var out []byte
				switch rng.IntN(4) {
				case 0: // random bytes
					out = buf[:1+rng.IntN(len(buf)-1)]
					for j := range out {
						out[j] = byte(rng.Uint32())
					}
				case 1: // truncated CONNECT
					out = connect.Bytes()[:rng.IntN(connect.Len())]
				case 2: // valid CONNECT, then a truncated or corrupted PUBLISH
					p := append([]byte(nil), publish.Bytes()...)
					p[rng.IntN(len(p))] = byte(rng.Uint32())
					out = append(append([]byte(nil), connect.Bytes()...), p[:1+rng.IntN(len(p)-1)]...)
				default: // a huge announced length, few bytes
					out = []byte{0x10, 0xff, 0xff, 0xff, 0x7f, 0, 4, 'M', 'Q'}
				}
				_ = c.SetDeadline(time.Now().Add(200 * time.Millisecond))
				_, _ = c.Write(out)
				sent.Add(int64(len(out)))
				_, _ = c.Read(buf[:64])
				c.Close()
			}
		}()
	}

	// The well-behaved client.
	topic := uniqueTopic("garbagegood")
	ledger := newLedger()
	perWindow := 50
	total := 0
	deadline := time.Now().Add(dur)
	c := connectPaho(t, b.MQTTAddr(), "good-"+randHex(3))
	var maxWindow time.Duration
	for time.Now().Before(deadline) && total < 1_000_000 {
		start := time.Now()
		var toks []interface {
			WaitTimeout(time.Duration) bool
			Error() error
		}
		for s := total; s < total+perWindow; s++ {
			toks = append(toks, c.Publish(topic, 1, false, strconv.Itoa(s)))
		}
		for i, tok := range toks {
			if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
				t.Fatalf("good client: publish %d not acked during the garbage: %v", total+i, tok.Error())
			}
		}
		total += perWindow
		maxWindow = max(maxWindow, time.Since(start))
	}
	close(stop)
	wg.Wait()
	acked := make([]bool, total)
	for i := range acked {
		acked[i] = true
	}
	ledger.acked[topic] = acked
	a, records, dups := verifyAcked(t, brokers, ledger)
	waitFor(t, 15*time.Second, "garbage connections gone", func() bool {
		return metricValue(t, b, "ferry_mqtt_connections", nil) == 1
	})
	var g1 int
	waitFor(t, 15*time.Second, "goroutines back to the baseline", func() bool {
		g1 = runtime.NumGoroutine()
		return g1 <= g0+60 // paho client + kafka connections
	})
	t.Logf("garbage for %s: %d connections, %s of random/truncated bytes; good client: %d QoS1 acked (slowest window of %d: %s), in Kafka %d, duplicates %d; goroutines %d -> %d",
		dur, conns.Load(), mib(sent.Load()), a, perWindow, maxWindow.Round(time.Millisecond), records, dups, g0, g1)
	publishAcked(t, b.MQTTAddr(), "after-garbage-"+randHex(3), uniqueTopic("aftergarbage"), 100)
}

// TestBadInputUnmappableKafkaRecords: records on a Kafka topic with no MQTT
// mapping, with or without an invalid mqtt.topic header, are skipped and
// counted; a record whose user-property header is not UTF-8 still arrives;
// the good records behind them arrive.
func TestBadInputUnmappableKafkaRecords(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	k, m := revTopic(t, "unmap")
	bad := "ferrytest.unmappable-" + randHex(4) // '.' never decodes
	kafkatest.CreateTopic(t, brokers, k, 1, nil)
	kafkatest.CreateTopic(t, brokers, bad, 1, nil)
	cfg := reverseConfig(brokers, k)
	cfg.Reverse.Topics = append(cfg.Reverse.Topics, bad)
	// Its "#" subscriber counts the reverse topics' records only: reading on
	// demand would bring it every topic of the shared test Kafka.
	cfg.Reverse.OnDemand = false
	b := startBridge(t, cfg)
	col := &collector{}
	subscribePaho(t, b.MQTTAddr(), "unmap-"+randHex(4), "#", true, col)
	waitSubscribers(t, b, m, 1)
	produceAll(t, kgoProducer(t, brokers), []*kgo.Record{
		{Topic: bad, Value: []byte("lost-plain")},
		{Topic: bad, Value: []byte("lost-wildcard"), Headers: []kgo.RecordHeader{{Key: topicmap.HeaderMQTTTopic, Value: []byte("a/+/b")}}},
		{Topic: bad, Value: []byte("lost-utf8"), Headers: []kgo.RecordHeader{{Key: topicmap.HeaderMQTTTopic, Value: []byte("a/\xff")}}},
		{Topic: k, Value: []byte("0.0"), Headers: []kgo.RecordHeader{{Key: "bad\xffkey", Value: []byte("v")}}},
		{Topic: k, Value: []byte("0.1")},
	})
	waitFor(t, 30*time.Second, "the good records", func() bool { return col.len() >= 2 })
	waitFor(t, 10*time.Second, "skips counted", func() bool {
		return metricValue(t, b, "ferry_reverse_skipped_total", map[string]string{"reason": "unmappable"}) == 3
	})
	checkSeqOrder(t, "subscriber", col.snapshot(), 2)
}
