package bridge

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	pahov5 "github.com/eclipse/paho.golang/paho"
	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
	"github.com/ferry-bridge/ferry/topicmap"
)

// TestReverseKcatToSubscribers: records produced with kcat reach a
// mosquitto_sub and a paho subscriber (QoS 1), all of them, in order per
// partition (per key here: a key always lands on one partition).
func TestReverseKcatToSubscribers(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatal("kcat not installed (apt-get install kcat; scripts/test.sh installs it)")
	}
	msub, err := exec.LookPath("mosquitto_sub")
	if err != nil {
		t.Fatal("mosquitto_sub not installed (apt-get install mosquitto-clients; scripts/test.sh installs it)")
	}
	brokers := kafkatest.Brokers(t)
	n := scaled(10000, 2000)
	const keys = 3
	k, m := revTopic(t, "kcat")
	kafkatest.CreateTopic(t, brokers, k, 3, nil)
	b := startBridge(t, reverseConfig(brokers, k))
	host, port, _ := strings.Cut(b.MQTTAddr(), ":")

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var msubOut bytes.Buffer
	ms := exec.CommandContext(ctx, msub, "-h", host, "-p", port, "-t", m, "-q", "1",
		"-C", strconv.Itoa(n), "-W", "110", "-i", "msub-"+randHex(4))
	ms.Stdout = &msubOut
	var msubErr bytes.Buffer
	ms.Stderr = &msubErr
	if err := ms.Start(); err != nil {
		t.Fatalf("mosquitto_sub: %v", err)
	}
	col := &collector{}
	subscribePaho(t, b.MQTTAddr(), "paho-"+randHex(4), m, true, col)
	waitSubscribers(t, b, m, 2)

	var in bytes.Buffer
	for i := range n {
		fmt.Fprintf(&in, "k%d:%d.%d\n", i%keys, i%keys, i)
	}
	start := time.Now()
	kc := exec.CommandContext(ctx, kcat, "-P", "-b", brokers, "-t", k, "-K:")
	kc.Stdin = &in
	if out, err := kc.CombinedOutput(); err != nil {
		t.Fatalf("kcat: %v: %s", err, out)
	}
	if err := ms.Wait(); err != nil {
		t.Fatalf("mosquitto_sub: %v (received %d lines): %s", err, strings.Count(msubOut.String(), "\n"), msubErr.String())
	}
	msubTook := time.Since(start)
	waitFor(t, 60*time.Second, "paho subscriber", func() bool { return col.len() >= n })
	t.Logf("%d records kcat -> bridge -> mosquitto_sub in %s (%.0f msg/s), paho got %d",
		n, msubTook.Round(time.Millisecond), float64(n)/msubTook.Seconds(), col.len())
	checkSeqOrder(t, "mosquitto_sub", strings.Split(strings.TrimSuffix(msubOut.String(), "\n"), "\n"), n)
	checkSeqOrder(t, "paho", col.snapshot(), n)
	if d := metricValue(t, b, "ferry_mqtt_subscriber_drops_total", nil); d != 0 {
		t.Errorf("subscriber drops = %v, want 0 (the reverse path must pace itself to QoS 1 subscribers)", d)
	}
	if got := metricValue(t, b, "ferry_reverse_published_total", nil); got != float64(n) {
		t.Errorf("ferry_reverse_published_total = %v, want %d", got, n)
	}
	t.Logf("pacer waits: %d", b.reverse.PacerWaits())
}

// TestReverseRestartAtLeastOnce: the bridge is stopped in the middle of the
// records and started again with the same instance id (same group); the
// subscriber (persistent session, reconnecting with the same client id) ends
// with every record at least once. Duplicates are reported.
//
// The records are a backlog an hour older than the subscription: the
// reverse path hands them out live all the same, and so the resume's
// replay, reading from the session's positions, owes them too. With records
// younger than the subscription's time less its one second of slack, this
// passed; a cold run under load that took longer from the records to the
// SUBSCRIBE got nothing after the restart (the replay skipped them as older
// than the subscription, and the reverse path's deliveries were discarded
// as copies of what it had handled).
func TestReverseRestartAtLeastOnce(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	n := scaled(50000, 10000)
	if testing.Short() {
		n = 5000
	}
	k, m := revTopic(t, "restart")
	kafkatest.CreateTopic(t, brokers, k, 2, nil)
	recs := seqRecords(k, n, 4)
	old := time.Now().Add(-time.Hour)
	for _, r := range recs {
		r.Timestamp = old
	}
	produceAll(t, kgoProducer(t, brokers), recs)

	cfg := reverseConfig(brokers, k)
	hold1 := make(chan struct{})
	cfg.reverseHold = hold1
	b1 := startBridge(t, cfg)
	addr := b1.MQTTAddr()
	subID := "restart-sub-" + randHex(4)
	col := &collector{}
	subscribePaho(t, addr, subID, m, false, col)
	close(hold1)
	// Both partitions handed out before the restart: a partition with
	// nothing handed out has no position, and its records, an hour older
	// than the subscription, are owed to a resuming session only live (the
	// limit docs/sessions.md states; a fresh-clone run under load: 2,500
	// of 10,000 never came, one partition's share, discarded as copies of
	// what the replay skipped by time).
	partOf := map[string]int32{}
	for _, r := range recs {
		partOf[string(r.Value)] = r.Partition
	}
	waitFor(t, 60*time.Second, "a third of the records, of both partitions, before the restart", func() bool {
		seen := map[int32]bool{}
		for _, p := range col.snapshot() {
			seen[partOf[p]] = true
		}
		return col.len() >= n/3 && len(seen) == 2
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b1.Close(ctx); err != nil {
		t.Fatalf("close first bridge: %v", err)
	}
	before := col.len()

	// Same instance (group), same address. The subscriber reconnects and
	// subscribes again; the hold makes sure its subscription is live before
	// the restarted reverse path publishes anything. Its SUBACK does not say
	// that: the session resumes, and its subscriptions go live in the broker
	// when its replay's first pass is done (session/replay.go). The records
	// are an hour older than the subscription, so a partition the first
	// instance handed out nothing of before the restart has no position, the
	// replay owes the session none of it (docs/sessions.md), and what the
	// reverse path handed out before the subscription went live was lost to
	// it (a fresh-clone run under load: one partition of two, 2,500 of
	// 10,000, never came).
	cfg2 := cfg
	cfg2.MQTT.Listen = addr
	hold2 := make(chan struct{})
	cfg2.reverseHold = hold2
	b2 := startBridge(t, cfg2)
	sub2 := subscribePaho(t, addr, subID, m, false, col)
	waitSubscribers(t, b2, m, 1)
	close(hold2)
	distinct := func() int {
		seen := map[string]struct{}{}
		for _, p := range col.snapshot() {
			seen[p] = struct{}{}
		}
		return len(seen)
	}
	deadline := time.Now().Add(120 * time.Second)
	for col.len() < n || distinct() != n {
		if time.Now().After(deadline) {
			// What the second instance did with the session, for a failure
			// that does not say it itself.
			inflight, subs := -1, -1
			if cl, ok := b2.server.Clients.Get(subID); ok {
				inflight, subs = cl.State.Inflight.Len(), cl.State.Subscriptions.Len()
			}
			t.Fatalf("after the restart: received %d, distinct %d of %d (%d before the restart); second instance consumed %v published %v; "+
				"subscriber connected %v (on b2: %d in flight, %d subscriptions); b2 sessions resumed %v, taken over %v, replayed new %v / duplicate %v, "+
				"live copies discarded %v, queue drops %v, subscriber drops %v",
				col.len(), distinct(), n, before, metricValue(t, b2, "ferry_reverse_records_consumed_total", nil),
				metricValue(t, b2, "ferry_reverse_published_total", nil), sub2.IsConnected(), inflight, subs,
				metricValue(t, b2, "ferry_sessions_resumed_total", nil), metricValue(t, b2, "ferry_sessions_taken_over_total", nil),
				metricValue(t, b2, "ferry_sessions_replayed_total", map[string]string{"kind": "new"}),
				metricValue(t, b2, "ferry_sessions_replayed_total", map[string]string{"kind": "duplicate"}),
				metricValue(t, b2, "ferry_sessions_live_copies_discarded_total", nil),
				metricValue(t, b2, "ferry_dropped_total", map[string]string{"reason": "session_queue_full"}),
				metricValue(t, b2, "ferry_mqtt_subscriber_drops_total", nil))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Order per key across the restart: the first occurrence of each seq.
	var firsts []string
	seen := map[string]bool{}
	for _, p := range col.snapshot() {
		if !seen[p] {
			seen[p] = true
			firsts = append(firsts, p)
		}
	}
	checkSeqOrder(t, "subscriber (first deliveries)", firsts, n)
	t.Logf("%d records, restart after %d: received %d, distinct %d, duplicates %d; second instance published %v",
		n, before, col.len(), distinct(), col.len()-distinct(), metricValue(t, b2, "ferry_reverse_published_total", nil))
}

// TestReversePersistentSessionRedelivery: a QoS 1 persistent session
// (clean=false) is offline while records arrive: the messages wait in the
// session and are resent (DUP set) when the client reconnects, without
// subscribing again, in the order they were delivered (issue 16: mochi alone
// sorts them by creation second, at random within a second).
func TestReversePersistentSessionRedelivery(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	const n = 200
	k, m := revTopic(t, "persist")
	kafkatest.CreateTopic(t, brokers, k, 1, nil)
	b := startBridge(t, reverseConfig(brokers, k))
	subID := "persist-sub-" + randHex(4)
	col := &dupCollector{}
	subscribeThenGoOffline(t, b, subID, m, func(o *paho.ClientOptions) {
		o.SetOrderMatters(true).SetCleanSession(false).SetDefaultPublishHandler(col.handler)
	})
	produceAll(t, kgoProducer(t, brokers), seqRecords(k, n, 1))
	waitFor(t, 30*time.Second, "records published", func() bool {
		return metricValue(t, b, "ferry_reverse_published_total", nil) >= n
	})
	if got, _ := col.snapshot(); len(got) != 0 {
		t.Fatalf("offline subscriber received %d messages", len(got))
	}
	connectPaho(t, b.MQTTAddr(), subID, func(o *paho.ClientOptions) {
		o.SetOrderMatters(true).SetCleanSession(false).SetDefaultPublishHandler(col.handler)
	}) // no SUBSCRIBE: the session has it
	waitFor(t, 30*time.Second, "redelivery after reconnect", func() bool { got, _ := col.snapshot(); return len(got) >= n })
	got, dups := col.snapshot()
	for i := range n {
		if want := fmt.Sprintf("0.%d", i); got[i] != want {
			t.Fatalf("message %d as received is %q, want %q: %q", i, got[i], want, got)
		}
		// Queued while offline, never sent before: a first delivery, DUP 0
		// [MQTT-3.3.1-1] (DUP marks a re-delivery).
		if dups[i] {
			t.Errorf("message %d, queued while offline, has DUP set", i)
		}
	}
}

func seqOf(p string) int {
	_, s, _ := strings.Cut(p, ".")
	n, _ := strconv.Atoi(s)
	return n
}

// TestReverseTwoInstances: two bridges (own groups) consume the same topic;
// a subscriber on each receives every record.
func TestReverseTwoInstances(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	n := scaled(5000, 1000)
	k, m := revTopic(t, "two")
	kafkatest.CreateTopic(t, brokers, k, 2, nil)
	var cols [2]*collector
	for i := range cols {
		b := startBridge(t, reverseConfig(brokers, k))
		cols[i] = &collector{}
		subscribePaho(t, b.MQTTAddr(), fmt.Sprintf("two-%d-%s", i, randHex(3)), m, true, cols[i])
		waitSubscribers(t, b, m, 1)
	}
	produceAll(t, kgoProducer(t, brokers), seqRecords(k, n, 4))
	for i, c := range cols {
		waitFor(t, 60*time.Second, fmt.Sprintf("subscriber %d", i), func() bool { return c.len() >= n })
		checkSeqOrder(t, fmt.Sprintf("subscriber on instance %d", i), c.snapshot(), n)
	}
}

// TestReverseRetainHeaderAndUserProperties: a record with mqtt.retain=true
// is retained; an MQTT v5 subscriber that connects later receives it, with
// the record's other headers as user properties.
func TestReverseRetainHeaderAndUserProperties(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	k, m := revTopic(t, "retain")
	kafkatest.CreateTopic(t, brokers, k, 1, nil)
	cfg := reverseConfig(brokers, k)
	cfg.Topics.Reverse = nil // QoS and retain from the headers only
	b := startBridge(t, cfg)
	produceAll(t, kgoProducer(t, brokers), []*kgo.Record{{Topic: k, Value: []byte("kept"), Headers: []kgo.RecordHeader{
		{Key: topicmap.HeaderRetain, Value: []byte("true")},
		{Key: topicmap.HeaderQoS, Value: []byte("1")},
		{Key: "color", Value: []byte("blue")},
	}}})
	waitFor(t, 30*time.Second, "record published", func() bool {
		return metricValue(t, b, "ferry_reverse_published_total", nil) >= 1
	})
	got := make(chan *pahov5.Publish, 1)
	c := connectV5(t, b.MQTTAddr(), "late-"+randHex(4), func(cc *pahov5.ClientConfig, _ *pahov5.Connect) {
		cc.OnPublishReceived = []func(pahov5.PublishReceived) (bool, error){func(pr pahov5.PublishReceived) (bool, error) {
			select {
			case got <- pr.Packet:
			default:
			}
			return true, nil
		}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Subscribe(ctx, &pahov5.Subscribe{Subscriptions: []pahov5.SubscribeOptions{{Topic: m, QoS: 1}}}); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	select {
	case p := <-got:
		if string(p.Payload) != "kept" || !p.Retain || p.QoS != 1 {
			t.Fatalf("got payload %q retain %v qos %d, want \"kept\" retained at QoS 1", p.Payload, p.Retain, p.QoS)
		}
		if p.Properties == nil || p.Properties.User.Get("color") != "blue" {
			t.Fatalf("user properties %+v, want color=blue", p.Properties)
		}
		for _, u := range p.Properties.User {
			if strings.HasPrefix(u.Key, "mqtt.") || strings.HasPrefix(u.Key, "ferry.") {
				t.Errorf("reserved header %q leaked as a user property", u.Key)
			}
		}
	case <-ctx.Done():
		t.Fatal("late subscriber did not receive the retained message")
	}
}

// TestReverseSkipsBadRecords: a record larger than mqtt.max_packet_size and
// records on a topic without a valid MQTT mapping are skipped and counted;
// the records behind them still arrive.
func TestReverseSkipsBadRecords(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	k, m := revTopic(t, "bad")
	bad := "ferrytest.unmappable-" + randHex(4) // '.' never decodes
	kafkatest.CreateTopic(t, brokers, k, 1, nil)
	kafkatest.CreateTopic(t, brokers, bad, 1, nil)
	cfg := reverseConfig(brokers, k)
	cfg.Reverse.Topics = append(cfg.Reverse.Topics, bad)
	cfg.MQTT.MaxPacketSize = 1024
	// Its "#" subscriber counts the reverse topics' records only: reading on
	// demand would bring it every topic of the shared test Kafka.
	cfg.Reverse.OnDemand = false
	b := startBridge(t, cfg)
	col := &collector{}
	subscribePaho(t, b.MQTTAddr(), "bad-"+randHex(4), "#", true, col)
	produceAll(t, kgoProducer(t, brokers), []*kgo.Record{
		{Topic: bad, Value: []byte("lost")},
		{Topic: k, Value: bytes.Repeat([]byte("x"), 2000)},
		{Topic: k, Value: []byte("0.0")},
	})
	waitFor(t, 30*time.Second, "the good record", func() bool { return col.len() >= 1 })
	waitFor(t, 10*time.Second, "skips counted", func() bool {
		return metricValue(t, b, "ferry_reverse_skipped_total", map[string]string{"reason": "too_large"}) == 1 &&
			metricValue(t, b, "ferry_reverse_skipped_total", map[string]string{"reason": "unmappable"}) == 1
	})
	if got := col.snapshot(); !slices.Equal(got, []string{"0.0"}) {
		t.Fatalf("subscriber got %q, want only the good record", got)
	}
	_ = m
}
