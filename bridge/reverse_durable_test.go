package bridge

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
	"github.com/ferry-bridge/ferry/topicmap"
)

// startReverseChild starts this test binary as a bridge process consuming
// topics from their first record (start_offset earliest: these tests are
// about restarts, and produce right after "ready", while the group may
// still be joining; where a new group starts is TestReverseStartNoRace...'s), with
// on mqttAddr (its state topics are the test's own, stateEnv). It is killed at the end of
// the test if still running.
func startReverseChild(t *testing.T, brokers, instance, mqttAddr string, topics ...string) *childBridge {
	t.Helper()
	var quoted []string
	for _, k := range topics {
		quoted = append(quoted, strconv.Quote(k))
	}
	yaml := fmt.Sprintf("instance: {id: %s}\nmqtt: {listen: %q}\nhttp: {listen: \"\"}\nkafka: {brokers: [%s]}\n"+
		"reverse: {topics: [%s], start_offset: earliest}\n",
		instance, mqttAddr, strings.Join(quotedAddrs(brokers), ", "), strings.Join(quoted, ", "))
	file := filepath.Join(t.TempDir(), "child.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &childBridge{t: t, env: []string{childEnv + "=1", childConfigEnv + "=" + file}}
	c.start()
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			// kill: a graceful stop would wait for the group (a killed
			// predecessor holds it until its session times out)
			c.kill9()
		}
	})
	return c
}

func quotedAddrs(brokers string) []string {
	var out []string
	for _, a := range kafkatest.Addrs(brokers) {
		out = append(out, strconv.Quote(a))
	}
	return out
}

// waitCommitted polls until group has committed offset want on partition 0
// of each topic.
func waitCommitted(t *testing.T, brokers, group string, want map[string]int64) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkatest.Addrs(brokers)...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var last string
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		offs, err := adm.FetchOffsets(ctx, group)
		cancel()
		done := err == nil
		if err != nil {
			last = err.Error()
		}
		for topic, n := range want {
			if o, ok := offs.Lookup(topic, 0); !ok || o.At != n {
				done, last = false, fmt.Sprintf("%s at %d", topic, o.At)
			}
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s: committed offsets not %v within 30s: %s", group, want, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dupCollector keeps payloads in arrival order with their DUP flags.
type dupCollector struct {
	mu   sync.Mutex
	msgs []string
	dups []bool
}

func (c *dupCollector) handler(_ paho.Client, m paho.Message) {
	c.mu.Lock()
	c.msgs = append(c.msgs, string(m.Payload()))
	c.dups = append(c.dups, m.Duplicate())
	c.mu.Unlock()
}

func (c *dupCollector) snapshot() ([]string, []bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.msgs...), append([]bool(nil), c.dups...)
}

// TestReverseSessionSurvivesRestart (issue 16): a persistent QoS 1 session
// (mosquitto_sub -c) is offline while 100 records arrive; once the bridge
// has committed their offsets it is killed (-9) or stopped (SIGTERM) and
// started again (nothing local: its session and retained messages are in
// Kafka). The subscriber reconnects with the same client id and does not
// subscribe: it receives 100 of 100, in order, DUP clear (never sent
// before). Retained messages from Kafka (mqtt.retain) survive too, and one
// cleared by an empty retained record stays cleared.
func TestReverseSessionSurvivesRestart(t *testing.T) {
	msub, err := exec.LookPath("mosquitto_sub")
	if err != nil {
		t.Fatal("mosquitto_sub not installed (apt-get install mosquitto-clients; scripts/test.sh installs it)")
	}
	for _, how := range []string{"kill9", "sigterm"} {
		t.Run(how, func(t *testing.T) {
			brokers := kafkatest.Brokers(t)
			k, m := revTopic(t, "dur"+how)
			kr, _ := revTopic(t, "ret"+how)
			kafkatest.CreateTopic(t, brokers, k, 1, nil)
			kafkatest.CreateTopic(t, brokers, kr, 1, nil)
			instance := "dur-" + randHex(4)
			addr := freeAddr(t)
			child := startReverseChild(t, brokers, instance, addr, k, kr)

			// Subscribe once with a persistent session, then go offline.
			host, port, _ := strings.Cut(addr, ":")
			subID := "dur-sub-" + randHex(4)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if out, err := exec.CommandContext(ctx, msub, "-h", host, "-p", port, "-c", "-i", subID, "-q", "1",
				"-t", m, "-E").CombinedOutput(); err != nil {
				t.Fatalf("mosquitto_sub -c -E: %v: %s", err, out)
			}
			// mosquitto_sub has exited; the bridge may not have read its
			// DISCONNECT yet, and a record reaching a connection it still
			// holds is sent (then resent, DUP set, after the restart). The
			// session is offline once the bridge wrote it so.
			waitFor(t, 20*time.Second, "the session offline", func() bool {
				return child.metricLine(`ferry_sessions{state="offline"}`) == "1"
			})

			const n = 100
			retTopic := "ferrytest/ret" + randHex(4)
			retained := func(topic, value string) *kgo.Record {
				return &kgo.Record{Topic: kr, Value: []byte(value), Headers: []kgo.RecordHeader{
					{Key: topicmap.HeaderMQTTTopic, Value: []byte(topic)}, {Key: topicmap.HeaderRetain, Value: []byte("true")}}}
			}
			recs := append(seqRecords(k, n, 1),
				retained(retTopic+"/keep", "kept"), retained(retTopic+"/clear", "gone"), retained(retTopic+"/clear", ""))
			produceAll(t, kgoProducer(t, brokers), recs)
			// Committed: from here on only the session's position has them.
			waitCommitted(t, brokers, "ferry-"+instance, map[string]int64{k: n, kr: 3})

			if how == "kill9" {
				child.kill9()
			} else {
				child.stop()
			}
			startReverseChild(t, brokers, instance, addr, k, kr)

			col := &dupCollector{}
			connectPaho(t, addr, subID, func(o *paho.ClientOptions) {
				o.SetOrderMatters(true).SetCleanSession(false).SetDefaultPublishHandler(col.handler)
			}) // no SUBSCRIBE: the stored session has it
			waitFor(t, 20*time.Second, "100 redelivered messages", func() bool { got, _ := col.snapshot(); return len(got) >= n })
			got, dups := col.snapshot()
			for i := range n {
				if want := fmt.Sprintf("0.%d", i); got[i] != want {
					t.Fatalf("after %s: message %d is %q, want %q (order as received: %q)", how, i, got[i], want, got)
				}
				if dups[i] {
					t.Errorf("after %s: message %d, queued while offline and never sent, has DUP set", how, i)
				}
			}

			ret := &collector{}
			rc := subscribePaho(t, addr, "ret-"+randHex(4), retTopic+"/clear", true, ret)
			// mochi writes a subscription's retained messages right after its
			// SUBACK, before it reads the next packet, and paho hands
			// publishes over in order: once "kept" (second subscription) is
			// in, a retained message of the first would be in before it.
			if tok := rc.Subscribe(retTopic+"/keep", 1, ret.handler); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
				t.Fatalf("second subscribe: %v", tok.Error())
			}
			waitFor(t, 10*time.Second, "the retained message", func() bool { return slices.Contains(ret.snapshot(), "kept") })
			if r := ret.snapshot(); len(r) != 1 || r[0] != "kept" {
				t.Fatalf("retained after %s: %q, want only \"kept\"", how, r)
			}
		})
	}
}

// TestReverseNewTopicsFromFirstRecord (issue 16): with reverse.start_offset
// latest and the default refresh, a topic created after the bridge started
// (under a /regex/, or named in reverse.topics before it existed) is
// consumed from its first record, found within seconds; a topic that
// already had records when the group first started is not replayed.
func TestReverseNewTopicsFromFirstRecord(t *testing.T) {
	t.Run("regex", func(t *testing.T) { newTopicsFromFirstRecord(t, true) })
	t.Run("named", func(t *testing.T) { newTopicsFromFirstRecord(t, false) })
}

func newTopicsFromFirstRecord(t *testing.T, regex bool) {
	brokers := kafkatest.Brokers(t)
	tag := "rx" + randHex(4)
	old := "_ferrytest_" + tag + "_old_le"
	kafkatest.CreateTopic(t, brokers, old, 1, nil)
	prod := kgoProducer(t, brokers)
	produceAll(t, prod, []*kgo.Record{{Topic: old, Value: []byte("history")}})
	named := "_ferrytest_" + tag + "_named_le"

	cfg := testConfig(brokers)
	cfg.Reverse.Topics = []string{old, named} // exact names only: kgo's direct path
	fresh := []string{named}
	if regex {
		cfg.Reverse.Topics = []string{"/_ferrytest_" + tag + "_(old|new)_le/", named}
		fresh = append(fresh, "_ferrytest_"+tag+"_new_le")
	}
	b := startBridge(t, cfg)
	col := &collector{}
	subscribePaho(t, b.MQTTAddr(), "rx-"+randHex(4), "/ferrytest/"+tag+"/#", true, col)
	// A fresh record of the old topic: the group consumes before the new
	// topics exist.
	produceAll(t, prod, []*kgo.Record{{Topic: old, Value: []byte("fresh")}})
	waitFor(t, 30*time.Second, "a new record of the old topic", func() bool { return col.len() >= 1 })

	start := time.Now()
	for _, k := range fresh {
		kafkatest.CreateTopic(t, brokers, k, 1, nil)
		produceAll(t, prod, []*kgo.Record{{Topic: k, Value: []byte(k + ".0")}, {Topic: k, Value: []byte(k + ".1")}, {Topic: k, Value: []byte(k + ".2")}})
	}
	produced := time.Now()
	want := 1 + 3*len(fresh)
	waitFor(t, 30*time.Second, "the first records of the new topics", func() bool { return col.len() >= want })
	got := col.snapshot()
	t.Logf("new topics: created and produced in %s (the producer's own metadata wait), delivered %s after the produce acks: %q",
		produced.Sub(start).Round(time.Millisecond), time.Since(produced).Round(time.Millisecond), got)
	per := map[string][]string{}
	for _, p := range got {
		k, _, _ := strings.Cut(p, ".")
		per[k] = append(per[k], p)
	}
	for _, k := range fresh {
		if want := []string{k + ".0", k + ".1", k + ".2"}; fmt.Sprint(per[k]) != fmt.Sprint(want) {
			t.Errorf("topic %s: got %q, want %q", k, per[k], want)
		}
	}
	if fmt.Sprint(per["history"]) != "[]" || fmt.Sprint(per["fresh"]) != "[fresh]" {
		t.Errorf("old topic: got %q and %q, want no history and the fresh record", per["history"], per["fresh"])
	}
}

// TestReverseOfflineBacklogNeverSilent (issue 16): a persistent QoS 1
// subscriber is offline while 20,000 records arrive, more than mochi keeps
// in flight for one client (MaximumInflight): every record is either
// delivered after the reconnect, in order, or counted in
// ferry_mqtt_subscriber_drops_total. None is lost silently.
func TestReverseOfflineBacklogNeverSilent(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	const n = 20000
	k, m := revTopic(t, "backlog")
	kafkatest.CreateTopic(t, brokers, k, 1, nil)
	cfg := reverseConfig(brokers, k)
	b := startBridge(t, cfg)
	subID := "backlog-" + randHex(4)
	opts := func(c *dupCollector) func(o *paho.ClientOptions) {
		return func(o *paho.ClientOptions) {
			o.SetOrderMatters(true).SetCleanSession(false).SetDefaultPublishHandler(c.handler)
		}
	}
	col := &dupCollector{}
	subscribeThenGoOffline(t, b, subID, m, opts(col))
	produceAll(t, kgoProducer(t, brokers), seqRecords(k, n, 1))
	waitFor(t, 60*time.Second, "records published", func() bool {
		return metricValue(t, b, "ferry_reverse_published_total", nil) >= n
	})
	drops := int(metricValue(t, b, "ferry_mqtt_subscriber_drops_total", nil))
	connectPaho(t, b.MQTTAddr(), subID, opts(col))
	deadline := time.Now().Add(60 * time.Second)
	for got, _ := col.snapshot(); len(got)+drops < n; got, _ = col.snapshot() {
		if time.Now().After(deadline) {
			t.Fatalf("after reconnect: %d delivered + %d counted drops < %d records", len(got), drops, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	got, _ := col.snapshot()
	t.Logf("offline backlog of %d: %d delivered after reconnect, %d counted drops (mochi MaximumInflight %d)",
		n, len(got), drops, b.server.Options.Capabilities.MaximumInflight)
	if len(got)+drops != n {
		t.Fatalf("delivered %d + counted drops %d != %d records", len(got), drops, n)
	}
	for i, p := range got {
		if want := fmt.Sprintf("0.%d", i); p != want {
			t.Fatalf("delivered message %d is %q, want %q", i, p, want)
		}
	}
}

// TestReverseBurstNoRule (issue 16): a burst of 200,000 records on a reverse
// topic with no rule reaches a QoS 1 subscriber in full and in order (the
// default delivery QoS is 1: at QoS 0 the subscriber queue overflowed).
func TestReverseBurstNoRule(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	n := scaled(200000, 40000)
	k, m := revTopic(t, "burst")
	kafkatest.CreateTopic(t, brokers, k, 1, nil)
	cfg := reverseConfig(brokers, k)
	cfg.Topics.Reverse = nil
	hold := make(chan struct{})
	cfg.reverseHold = hold
	b := startBridge(t, cfg)
	col := &collector{}
	subscribePaho(t, b.MQTTAddr(), "burst-"+randHex(4), m, true, col)
	produceAll(t, kgoProducer(t, brokers), seqRecords(k, n, 1))
	start := time.Now()
	close(hold) // the whole burst is in Kafka: the reverse path reads it at full speed
	deadline := time.Now().Add(120 * time.Second)
	for col.len() < n {
		if time.Now().After(deadline) {
			t.Fatalf("burst: subscriber got %d of %d within 120s (published %v, drops %v, pacer waits %d)", col.len(), n,
				metricValue(t, b, "ferry_reverse_published_total", nil), metricValue(t, b, "ferry_mqtt_subscriber_drops_total", nil),
				b.reverse.PacerWaits())
		}
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(start)
	t.Logf("%d records, no rule, QoS 1 subscription: all delivered in %s (%.0f msg/s), drops %v",
		n, took.Round(time.Millisecond), float64(n)/took.Seconds(), metricValue(t, b, "ferry_mqtt_subscriber_drops_total", nil))
	checkSeqOrder(t, "subscriber", col.snapshot(), n)
	if d := metricValue(t, b, "ferry_mqtt_subscriber_drops_total", nil); d != 0 {
		t.Errorf("subscriber drops = %v, want 0", d)
	}
}

// TestReverseCommitWaitsForCleanSessionAck (issue 16): a QoS 1 delivery to a
// clean session has no position to come back from (the session ends with
// the connection), so its record's offset is committed only once the
// subscriber has acknowledged it.
func TestReverseCommitWaitsForCleanSessionAck(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	const n = 10
	k, m := revTopic(t, "ackgate")
	kafkatest.CreateTopic(t, brokers, k, 1, nil)
	cfg := reverseConfig(brokers, k)
	b := startBridge(t, cfg)
	var mu sync.Mutex
	var held []paho.Message
	sub := connectPaho(t, b.MQTTAddr(), "ackgate-"+randHex(4), func(o *paho.ClientOptions) {
		o.SetOrderMatters(true).SetAutoAckDisabled(true)
	})
	if tok := sub.Subscribe(m, 1, func(_ paho.Client, msg paho.Message) {
		mu.Lock()
		held = append(held, msg) // not acknowledged yet
		mu.Unlock()
	}); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	produceAll(t, kgoProducer(t, brokers), seqRecords(k, n, 1))
	waitFor(t, 30*time.Second, "all messages received", func() bool { mu.Lock(); defer mu.Unlock(); return len(held) == n })
	// Several flush rounds run while nothing is acknowledged: none may mark.
	f := b.reverse.Flushes()
	waitFor(t, 10*time.Second, "three flush rounds", func() bool { return b.reverse.Flushes() >= f+3 })
	if o, ok := b.reverse.MarkedOffsets()[k][0]; ok && o.Offset > 0 {
		t.Fatalf("offset %d marked for commit while the clean-session subscriber has acknowledged nothing", o.Offset)
	}
	mu.Lock()
	for _, msg := range held {
		msg.Ack()
	}
	mu.Unlock()
	waitCommitted(t, brokers, reverseGroupID(cfg), map[string]int64{k: n})
}

// TestReverseReservedHeadersFirstOnly (issue 14, finding 7): only the first
// of each reserved header counts. A record carrying mqtt.retain false then
// true, ferry.origin of another instance then this one's, and mqtt.qos 0
// then 1 is delivered (not skipped as this instance's own), at QoS 0, and not
// retained.
func TestReverseReservedHeadersFirstOnly(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	k, _ := revTopic(t, "hdr")
	kafkatest.CreateTopic(t, brokers, k, 1, nil)
	cfg := reverseConfig(brokers, k)
	cfg.Topics.Reverse = nil // QoS and retain from the headers and the default
	b := startBridge(t, cfg)
	base := "ferrytest/hdr" + randHex(4)
	type got struct {
		payload string
		qos     byte
	}
	var mu sync.Mutex
	var live []got
	sub := connectPaho(t, b.MQTTAddr(), "hdr-"+randHex(4), func(o *paho.ClientOptions) { o.SetOrderMatters(true) })
	if tok := sub.Subscribe(base+"/a", 1, func(_ paho.Client, m paho.Message) {
		mu.Lock()
		live = append(live, got{string(m.Payload()), m.Qos()})
		mu.Unlock()
	}); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	h := func(k, v string) kgo.RecordHeader { return kgo.RecordHeader{Key: k, Value: []byte(v)} }
	produceAll(t, kgoProducer(t, brokers), []*kgo.Record{
		{Topic: k, Value: []byte("a"), Headers: []kgo.RecordHeader{h(topicmap.HeaderMQTTTopic, base+"/a"),
			h(topicmap.HeaderRetain, "false"), h(topicmap.HeaderRetain, "true"),
			h(topicmap.HeaderOrigin, "another-instance"), h(topicmap.HeaderOrigin, b.InstanceID()),
			h(topicmap.HeaderQoS, "0"), h(topicmap.HeaderQoS, "1")}},
		{Topic: k, Value: []byte("marker"), Headers: []kgo.RecordHeader{h(topicmap.HeaderMQTTTopic, base+"/marker"),
			h(topicmap.HeaderRetain, "true")}},
	})
	waitFor(t, 30*time.Second, "both records handled", func() bool {
		return metricValue(t, b, "ferry_reverse_published_total", nil)+
			metricValue(t, b, "ferry_reverse_skipped_total", map[string]string{"reason": "own_origin"}) >= 2
	})
	waitFor(t, 10*time.Second, "the live delivery", func() bool { mu.Lock(); defer mu.Unlock(); return len(live) >= 1 })
	mu.Lock()
	if live[0] != (got{"a", 0}) {
		t.Errorf("live subscriber got %+v, want payload a at QoS 0 (the first mqtt.qos)", live[0])
	}
	mu.Unlock()
	// A late subscriber: a retained "a" would arrive before the retained
	// marker of its second subscription (mochi writes retained messages
	// right after each SUBACK; paho hands publishes over in order).
	late := &collector{}
	lc := subscribePaho(t, b.MQTTAddr(), "hdr-late-"+randHex(4), base+"/a", true, late)
	if tok := lc.Subscribe(base+"/marker", 1, late.handler); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe marker: %v", tok.Error())
	}
	waitFor(t, 10*time.Second, "the retained marker", func() bool { return slices.Contains(late.snapshot(), "marker") })
	if r := late.snapshot(); !slices.Equal(r, []string{"marker"}) {
		t.Errorf("late subscriber got retained %q, want only the marker (the first mqtt.retain was false)", r)
	}
}

// TestReverseTopicRecreated: a reverse topic deleted and re-created under a
// running bridge (start_offset latest, the default) is consumed again from
// its first record, in order, for a named topic and one under a /regex/.
// Before, kgo kept the old topic ID and every fetch failed with
// UNKNOWN_TOPIC_ID until a restart (tens of thousands of errors a second).
func TestReverseTopicRecreated(t *testing.T) {
	for _, regex := range []bool{false, true} {
		name := map[bool]string{false: "named", true: "regex"}[regex]
		t.Run(name, func(t *testing.T) {
			t.Parallel() // each mostly waits on Kafka (a deletion takes ~5 s)
			brokers := kafkatest.Brokers(t)
			k, m := revTopic(t, "recreate"+name)
			kafkatest.CreateTopic(t, brokers, k, 1, nil)
			cfg := testConfig(brokers)
			cfg.Reverse.Topics = []string{k}
			if regex {
				cfg.Reverse.Topics = []string{"/" + regexp.QuoteMeta(k) + "/"}
			}
			b := startBridge(t, cfg)
			col := &collector{}
			subscribePaho(t, b.MQTTAddr(), "rc-"+randHex(4), m, true, col)
			prod := kgoProducer(t, brokers)
			// Consumed before the deletion (retried: the group may still be joining).
			waitFor(t, 30*time.Second, "a record before the deletion", func() bool {
				produceAll(t, prod, []*kgo.Record{{Topic: k, Value: []byte("before")}})
				return col.len() > 0
			})
			kafkatest.DeleteTopic(t, brokers, k)
			kafkatest.CreateTopic(t, brokers, k, 1, nil)
			prod.PurgeTopicsFromClient(k) // the producer must learn the new topic ID too
			after := []string{"after.0", "after.1", "after.2"}
			var recs []*kgo.Record
			for _, v := range after {
				recs = append(recs, &kgo.Record{Topic: k, Value: []byte(v)})
			}
			produceAll(t, prod, recs)
			waitFor(t, 40*time.Second, "the re-created topic's records", func() bool {
				return slices.Contains(col.snapshot(), after[len(after)-1])
			})
			var got []string
			for _, v := range col.snapshot() {
				if strings.HasPrefix(v, "after.") {
					got = append(got, v)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(after) {
				t.Fatalf("re-created topic delivered %q, want %q from its first record, in order", got, after)
			}
		})
	}
}
