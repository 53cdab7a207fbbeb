package bridge

import (
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
)

// TestAcksInPublishOrder: a pipelined MQTT 5 client gets every
// acknowledgement in PUBLISH order, refusals included: an unmappable
// topic's 0x90 (QoS 1 and 2) waits behind the PUBACK of an earlier publish
// that is still on its way to Kafka, and so do the acknowledgements of an
// excluded (local only) topic and the PUBREC of an accepted QoS 2 publish.
// Linger holds the records in the bridge long enough that an
// acknowledgement written at once would overtake them.
func TestAcksInPublishOrder(t *testing.T) {
	cfg := testConfig(kafkatest.Brokers(t))
	cfg.Kafka.Linger = 300 * time.Millisecond
	topic := uniqueTopic("order")
	local := "local-" + randHex(4) + "/x"
	cfg.Topics.Exclude = []string{"$SYS/#", local}
	b := startBridge(t, cfg)
	unmappable := strings.Repeat("x", 250) // longer than Kafka's 249 characters
	c := dialLight5(t, b.MQTTAddr(), "order-"+randHex(3), true, packets.Properties{})
	// Warm up: the first publish creates the Kafka topic.
	c.send(t, 5, publishPacket(topic, 1, 100, "warm-up"))
	if pk, _ := c.next(t, 5, 30*time.Second); pk.FixedHeader.Type != packets.Puback || pk.ReasonCode != 0 {
		t.Fatalf("warm-up: got type %d reason %#x", pk.FixedHeader.Type, pk.ReasonCode)
	}
	type ack struct {
		typ    byte
		id     uint16
		reason byte
	}
	sends := []struct {
		topic string
		qos   byte
		want  ack
	}{
		{topic, 1, ack{packets.Puback, 1, 0}},
		{unmappable, 1, ack{packets.Puback, 2, packets.ErrTopicNameInvalid.Code}},
		{unmappable, 2, ack{packets.Pubrec, 3, packets.ErrTopicNameInvalid.Code}},
		{topic, 1, ack{packets.Puback, 4, 0}},
		{local, 1, ack{packets.Puback, 5, 0}},
		{local, 2, ack{packets.Pubrec, 6, 0}},
		{topic, 2, ack{packets.Pubrec, 7, 0}},
	}
	for i, s := range sends {
		c.queue(t, 5, publishPacket(s.topic, s.qos, uint16(i+1), "m"))
	}
	if err := c.flush(); err != nil {
		t.Fatal(err)
	}
	for i, s := range sends {
		pk, _ := c.next(t, 5, 20*time.Second)
		if got := (ack{pk.FixedHeader.Type, pk.PacketID, pk.ReasonCode}); got != s.want {
			t.Fatalf("acknowledgement %d = %+v, want %+v (PUBLISH order)", i, got, s.want)
		}
	}
}

// TestV5ExcludedTopicsReleaseReceiveMaximum: publishes on an excluded
// (local only) topic count against the Receive Maximum only until they are
// acknowledged, and reach local subscribers.
func TestV5ExcludedTopicsReleaseReceiveMaximum(t *testing.T) {
	cfg := testConfig("")
	cfg.MQTT.MaxInflight = 2
	local := "local-" + randHex(4) + "/x"
	cfg.Topics.Exclude = []string{local}
	b := startBridge(t, cfg)
	sub := dialLight5(t, b.MQTTAddr(), "excl-sub-"+randHex(3), true, packets.Properties{})
	sub.send(t, 5, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe}, PacketID: 1,
		Filters: packets.Subscriptions{{Filter: local, Qos: 0}}})
	if pk, _ := sub.next(t, 5, 10*time.Second); pk.FixedHeader.Type != packets.Suback {
		t.Fatalf("want SUBACK, got type %d", pk.FixedHeader.Type)
	}
	c := dialLight5(t, b.MQTTAddr(), "excl-"+randHex(3), true, packets.Properties{})
	for i := range 6 {
		qos := byte(1 + i%2)
		c.send(t, 5, publishPacket(local, qos, uint16(i+1), strconv.Itoa(i)))
		pk, _ := c.next(t, 5, 10*time.Second)
		if pk.FixedHeader.Type != [3]byte{0, packets.Puback, packets.Pubrec}[qos] || pk.ReasonCode != 0 {
			t.Fatalf("publish %d: got type %d reason %#x", i, pk.FixedHeader.Type, pk.ReasonCode)
		}
		if qos == 2 {
			c.send(t, 5, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrel}, PacketID: uint16(i + 1)})
			if pk, _ := c.next(t, 5, 10*time.Second); pk.FixedHeader.Type != packets.Pubcomp {
				t.Fatalf("publish %d: got type %d, want PUBCOMP", i, pk.FixedHeader.Type)
			}
		}
		if pk, _ := sub.next(t, 5, 10*time.Second); string(pk.Payload) != strconv.Itoa(i) {
			t.Fatalf("local subscriber got %q, want %q", pk.Payload, strconv.Itoa(i))
		}
	}
}

// TestQoS2AckedAfterKafka: each QoS 2 publish's record is in Kafka at the
// moment its PUBREC arrives, and the exchange completes (PUBREL/PUBCOMP).
// A raw MQTT 3.1.1 client, so that the test sees the PUBREC itself.
func TestQoS2AckedAfterKafka(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	b := startBridge(t, testConfig(brokers))
	topic := uniqueTopic("qos2")
	ktopic := kafkaName(t, topic)
	kafkatest.CreateTopic(t, brokers, ktopic, 1, nil)
	c, err := dialLight(&net.Dialer{Timeout: 5 * time.Second}, b.MQTTAddr(), "qos2-pub", 4, 30)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	const n = 20
	for i := range n {
		id := uint16(i + 1)
		c.send(t, 4, publishPacket(topic, 2, id, strconv.Itoa(i)))
		pk, _ := c.next(t, 4, 20*time.Second)
		if pk.FixedHeader.Type != packets.Pubrec || pk.PacketID != id {
			t.Fatalf("publish %d: got type %d id %d, want PUBREC %d", i, pk.FixedHeader.Type, pk.PacketID, id)
		}
		if got := kafkatest.RecordCount(t, brokers, ktopic); got != int64(i+1) {
			t.Fatalf("PUBREC %d arrived while Kafka holds %d records, want %d", id, got, i+1)
		}
		c.send(t, 4, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrel}, PacketID: id})
		if pk, _ := c.next(t, 4, 20*time.Second); pk.FixedHeader.Type != packets.Pubcomp || pk.PacketID != id {
			t.Fatalf("publish %d: got type %d id %d, want PUBCOMP %d", i, pk.FixedHeader.Type, pk.PacketID, id)
		}
	}
	for i, m := range readTopic(t, b.KafkaBrokers(), ktopic, n, 20*time.Second) {
		if string(m.Value) != strconv.Itoa(i) {
			t.Fatalf("record %d = %q", i, m.Value)
		}
	}
}

// TestV5AcksCarryOnlyTheirOwnProperties: a QoS 1 and a QoS 2 publish with
// properties get a PUBACK / PUBREC without them (MQTT 5: an ack carries its
// own reason string and user properties only; a strict client rejects an
// 18-byte PUBREC).
func TestV5AcksCarryOnlyTheirOwnProperties(t *testing.T) {
	b := startBridge(t, testConfig(kafkatest.Brokers(t)))
	topic := uniqueTopic("ackprops")
	c := dialLight5(t, b.MQTTAddr(), "ackprops-"+randHex(3), true, packets.Properties{})
	for i, qos := range []byte{1, 2} {
		pk := publishPacket(topic, qos, uint16(i+1), "with properties")
		pk.Properties = packets.Properties{ContentType: "text/plain", ResponseTopic: "reply/here",
			PayloadFormat: 1, PayloadFormatFlag: true, MessageExpiryInterval: 60,
			User: []packets.UserProperty{{Key: "k", Val: "v"}}}
		c.send(t, 5, pk)
		ack, raw := c.next(t, 5, 30*time.Second)
		if ack.FixedHeader.Type != [3]byte{0, packets.Puback, packets.Pubrec}[qos] || ack.ReasonCode != 0 {
			t.Fatalf("QoS %d: got type %d reason %#x", qos, ack.FixedHeader.Type, ack.ReasonCode)
		}
		// Packet id (2) and at most a reason code: no property bytes.
		if len(raw) > 3 {
			t.Fatalf("QoS %d: ack body is %d bytes (%x): it carries the PUBLISH's properties", qos, len(raw), raw)
		}
		if qos == 2 {
			c.send(t, 5, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrel}, PacketID: uint16(i + 1)})
			if pc, raw := c.next(t, 5, 10*time.Second); pc.FixedHeader.Type != packets.Pubcomp || len(raw) > 3 {
				t.Fatalf("PUBCOMP: type %d body %x", pc.FixedHeader.Type, raw)
			}
		}
	}
}

// TestV5ReceiveMaximumExceeded: an MQTT 5 client that sends one QoS 1
// publish more than the server's Receive Maximum (mqtt.max_inflight)
// without waiting for acknowledgements is disconnected with 0x93
// [MQTT-3.3.4-9], and none of them is acknowledged before. Kafka holds
// every produce request until the test has read the refusal, so the first
// ones are surely unacknowledged when the last arrives.
func TestV5ReceiveMaximumExceeded(t *testing.T) {
	cfg := testConfig("") // embedded Kafka
	cfg.MQTT.MaxInflight = 4
	b := startBridge(t, cfg)
	holdProduce(t, b)
	topic := uniqueTopic("recvmax")
	c := dialLight5(t, b.MQTTAddr(), "recvmax-"+randHex(3), true, packets.Properties{})
	for i := range cfg.MQTT.MaxInflight + 1 {
		c.queue(t, 5, publishPacket(topic, 1, uint16(i+1), strconv.Itoa(i)))
	}
	if err := c.flush(); err != nil {
		t.Fatal(err)
	}
	code, acked := expectRefusal(t, c, 10*time.Second)
	if code != int(packets.ErrReceiveMaximum.Code) || acked {
		t.Fatalf("after %d unacknowledged publishes (Receive Maximum %d): disconnect reason %#x (acknowledged: %v), want 0x93 and no PUBACK",
			cfg.MQTT.MaxInflight+1, cfg.MQTT.MaxInflight, code, acked)
	}
}

// TestV311PipelineBeyondMaxInflightWaits: MQTT 3.1.1 has no Receive
// Maximum, so a client pipelining more than mqtt.max_inflight is slowed
// down, never disconnected: every publish is acknowledged.
func TestV311PipelineBeyondMaxInflightWaits(t *testing.T) {
	cfg := testConfig(kafkatest.Brokers(t))
	cfg.MQTT.MaxInflight = 4
	b := startBridge(t, cfg)
	publishAcked(t, b.MQTTAddr(), "pipe311-"+randHex(3), uniqueTopic("pipe311"), 50)
}

// TestV5ServerRespectsClientReceiveMaximum: a subscriber with Receive
// Maximum 2 has at most 2 unacknowledged QoS 1 deliveries; the next
// arrives when it acknowledges one [MQTT-3.3.4-9].
func TestV5ServerRespectsClientReceiveMaximum(t *testing.T) {
	b := startBridge(t, testConfig(kafkatest.Brokers(t)))
	topic := uniqueTopic("clientmax")
	sub := dialLight5(t, b.MQTTAddr(), "clientmax-sub-"+randHex(3), true, packets.Properties{ReceiveMaximum: 2})
	sub.send(t, 5, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe}, PacketID: 1,
		Filters: packets.Subscriptions{{Filter: topic, Qos: 1}}})
	if pk, _ := sub.next(t, 5, 10*time.Second); pk.FixedHeader.Type != packets.Suback {
		t.Fatalf("want SUBACK, got type %d", pk.FixedHeader.Type)
	}
	pub := connectPaho(t, b.MQTTAddr(), "clientmax-pub-"+randHex(3))
	for i := range 5 {
		// Each PUBACK comes after the local delivery was handed to mochi.
		if tok := pub.Publish(topic, 1, false, strconv.Itoa(i)); !tok.WaitTimeout(20*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %d: %v", i, tok.Error())
		}
	}
	var got []packets.Packet
	for range 2 {
		pk, _ := sub.next(t, 5, 10*time.Second)
		if pk.FixedHeader.Type != packets.Publish {
			t.Fatalf("want PUBLISH, got type %d", pk.FixedHeader.Type)
		}
		got = append(got, pk)
	}
	if pk, _, err := sub.tryNext(5, 500*time.Millisecond); !isTimeout(err) {
		t.Fatalf("a third unacknowledged delivery (type %d, %q) beyond the client's Receive Maximum 2 (err %v)", pk.FixedHeader.Type, pk.Payload, err)
	}
	sub.send(t, 5, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: got[0].PacketID})
	pk, _ := sub.next(t, 5, 10*time.Second)
	if pk.FixedHeader.Type != packets.Publish {
		t.Fatalf("after one PUBACK: want the next PUBLISH, got type %d", pk.FixedHeader.Type)
	}
	if pk, _, err := sub.tryNext(5, 500*time.Millisecond); !isTimeout(err) {
		t.Fatalf("a fourth delivery (type %d, %q) with only one acknowledged (err %v)", pk.FixedHeader.Type, pk.Payload, err)
	}
}

// TestAcksOrderedWithMochiWrites: a connection that also receives a flood
// of deliveries (so mochi keeps bytes of its own in its write buffer while
// deliveries wait in the client's queue) still gets the PUBREC of a QoS 2
// publish before the PUBACK of the QoS 1 publish sent after it. The
// subscriber reads slowly so that deliveries keep waiting in mochi.
func TestAcksOrderedWithMochiWrites(t *testing.T) {
	b := startBridge(t, testConfig(kafkatest.Brokers(t)))
	flood, topic := uniqueTopic("flood"), uniqueTopic("ordered")
	c, err := dialLight(&net.Dialer{Timeout: 5 * time.Second}, b.MQTTAddr(), "ordered-"+randHex(3), 4, 60)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if err := c.subscribe(4, flood, 0); err != nil {
		t.Fatal(err)
	}
	c.send(t, 4, publishPacket(topic, 1, 1, "warm-up")) // creates the Kafka topic
	for {
		pk, _ := c.next(t, 4, 30*time.Second)
		if pk.FixedHeader.Type == packets.Puback {
			break
		}
	}
	flooder := connectPaho(t, b.MQTTAddr(), "flooder-"+randHex(3))
	stop := make(chan struct{})
	floodDone := make(chan struct{})
	go func() {
		defer close(floodDone)
		for i := 0; i < 5_000_000; i++ {
			select {
			case <-stop:
				return
			default:
			}
			flooder.Publish(flood, 0, false, "flood-msg-12")
		}
	}()
	defer func() { close(stop); <-floodDone }()

	pairs := 200
	if raceEnabled {
		pairs = 10
	}
	overtaken := 0
	for i := range pairs {
		a, bID := uint16(2*i+10), uint16(2*i+11)
		c.queue(t, 4, publishPacket(topic, 2, a, "qos2"))
		c.queue(t, 4, publishPacket(topic, 1, bID, "qos1"))
		_ = c.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if err := c.flush(); err != nil {
			t.Fatal(err)
		}
		var order []byte
		for n := 0; len(order) < 2; n++ {
			if n > 1_000_000 {
				t.Fatalf("pair %d: no acknowledgements among 1,000,000 packets", i)
			}
			pk, _ := c.next(t, 4, 30*time.Second)
			switch pk.FixedHeader.Type {
			case packets.Pubrec, packets.Puback:
				order = append(order, pk.FixedHeader.Type)
			}
			if n%64 == 63 {
				time.Sleep(100 * time.Microsecond) // read slowly: deliveries queue up in mochi
			}
		}
		if order[0] != packets.Pubrec {
			overtaken++
		}
		c.queue(t, 4, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrel}, PacketID: a})
		if err := c.flush(); err != nil {
			t.Fatal(err)
		}
	}
	if overtaken > 0 {
		t.Fatalf("%d of %d QoS 1 PUBACKs overtook the PUBREC of the QoS 2 publish before them", overtaken, pairs)
	}
}

// TestV5ReceiveMaximumCountsQoS2NotQoS0: an accepted QoS 2 publish counts
// against the Receive Maximum until its PUBREL is answered; a QoS 0 publish
// never counts, even at the limit. Where publishes must be unacknowledged
// at once, Kafka holds the produce requests until the test releases them.
func TestV5ReceiveMaximumCountsQoS2NotQoS0(t *testing.T) {
	cfg := testConfig("") // embedded Kafka
	cfg.MQTT.MaxInflight = 4
	b := startBridge(t, cfg)
	topic := uniqueTopic("recvmax2")
	c := dialLight5(t, b.MQTTAddr(), "recvmax2-"+randHex(3), true, packets.Properties{})
	expect := func(typ byte, id uint16) {
		t.Helper()
		pk, _ := c.next(t, 5, 30*time.Second)
		if pk.FixedHeader.Type != typ || pk.PacketID != id || pk.ReasonCode >= 0x80 {
			t.Fatalf("got type %d id %d reason %#x, want type %d id %d", pk.FixedHeader.Type, pk.PacketID, pk.ReasonCode, typ, id)
		}
	}
	c.send(t, 5, publishPacket(topic, 1, 100, "warm-up")) // creates the Kafka topic
	expect(packets.Puback, 100)

	// One QoS 2 awaiting PUBREL + 3 QoS 1 held in Kafka = the limit; the
	// QoS 0 behind them is free.
	c.send(t, 5, publishPacket(topic, 2, 1, "q2"))
	expect(packets.Pubrec, 1)
	release := holdProduce(t, b)
	for id := uint16(2); id <= 4; id++ {
		c.queue(t, 5, publishPacket(topic, 1, id, "q1"))
	}
	c.queue(t, 5, publishPacket(topic, 0, 0, "q0"))
	if err := c.flush(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the QoS 0 publish read by the bridge", func() bool {
		return metricValue(t, b, "ferry_mqtt_publishes_received_total", map[string]string{"qos": "0"}) == 1
	})
	release()
	for id := uint16(2); id <= 4; id++ {
		expect(packets.Puback, id)
	}
	c.send(t, 5, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrel}, PacketID: 1})
	expect(packets.Pubcomp, 1)

	// PUBCOMP ended the QoS 2 publish's count: 4 QoS 1 fit again.
	for id := uint16(10); id <= 13; id++ {
		c.queue(t, 5, publishPacket(topic, 1, id, "q1"))
	}
	if err := c.flush(); err != nil {
		t.Fatal(err)
	}
	for id := uint16(10); id <= 13; id++ {
		expect(packets.Puback, id)
	}

	// One QoS 2 awaiting PUBREL + 4 QoS 1 held in Kafka = one too many.
	c.send(t, 5, publishPacket(topic, 2, 5, "q2"))
	expect(packets.Pubrec, 5)
	holdProduce(t, b)
	for id := uint16(6); id <= 9; id++ {
		c.queue(t, 5, publishPacket(topic, 1, id, "q1"))
	}
	if err := c.flush(); err != nil {
		t.Fatal(err)
	}
	if code, acked := expectRefusal(t, c, 10*time.Second); code != int(packets.ErrReceiveMaximum.Code) || acked {
		t.Fatalf("5 unacknowledged QoS 1/2 publishes with Receive Maximum 4: disconnect reason %#x (acknowledged: %v), want 0x93",
			code, acked)
	}
}

// holdProduce makes the embedded Kafka hold every produce request from now
// until release is called (at the latest when the test ends): publishes
// stay unacknowledged exactly as long as a test needs, with no timing.
func holdProduce(t testing.TB, b *Bridge) (release func()) {
	t.Helper()
	if b.embedded == nil {
		t.Fatal("holdProduce needs the embedded Kafka")
	}
	kc := b.embedded.cluster
	gate := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	kc.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		select {
		case <-gate:
			kc.DropControl()
		default:
			kc.SleepControl(func() { <-gate })
		}
		return nil, nil, false // then handled as usual
	})
	return release
}
