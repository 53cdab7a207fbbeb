package bridge

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	pahov3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
	"github.com/ferry-bridge/ferry/topicmap"
)

// Shared subscriptions across instances (package share): each message to
// exactly one member of the group, cluster-wide, whichever instance the
// members and the publisher use.

// shareTopics publishes one warm-up message ("w") to each of n MQTT topics
// under prefix through pub, so that their Kafka topics exist, and returns
// the topics.
func shareTopics(t *testing.T, pub pahov3.Client, prefix string, n int) []string {
	t.Helper()
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s/%d", prefix, i)
		if tok := pub.Publish(out[i], 1, false, "w"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("warm-up publish: %v", tok.Error())
		}
	}
	return out
}

// shareMember connects a 3.1.1 member of shared subscription key on b.
func shareMember(t *testing.T, b *Bridge, id, key string, qos byte, got *seqCollector, opts ...func(*pahov3.ClientOptions)) pahov3.Client {
	t.Helper()
	c := connectPaho(t, b.MQTTAddr(), id, append([]func(*pahov3.ClientOptions){func(o *pahov3.ClientOptions) {
		o.SetDefaultPublishHandler(func(_ pahov3.Client, m pahov3.Message) { got.add(m.Payload()) })
	}}, opts...)...)
	if tok := c.Subscribe(key, qos, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe %s: %v", key, tok.Error())
	}
	return c
}

// waitSplit waits until the instances with members hold all n partitions
// of group key between them, each some.
func waitSplit(t testing.TB, key string, n int, on ...*Bridge) {
	t.Helper()
	waitFor(t, 60*time.Second, "the group's partitions split among the members' instances", func() bool {
		sum := 0.0
		for _, b := range on {
			p := metricValue(t, b, "ferry_share_partitions", map[string]string{"group": key})
			if p < 1 {
				return false
			}
			sum += p
		}
		return sum == float64(n)
	})
}

// counts returns how many times each number below n was received by the
// collectors together.
func counts(n int, cs ...*seqCollector) []int {
	out := make([]int, n)
	for _, c := range cs {
		for _, v := range c.snapshot() {
			if v >= 0 && v < n {
				out[v]++
			}
		}
	}
	return out
}

// waitCovered waits until every number below n was received by one of cs.
func waitCovered(t *testing.T, n int, timeout time.Duration, cs ...*seqCollector) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		c := counts(n, cs...)
		var missing []int
		for i, k := range c {
			if k == 0 {
				missing = append(missing, i)
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages never reached a member: %v", len(missing), n, missing[:min(len(missing), 20)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSharedSubscriptionAcrossInstances: three instances, default
// configuration; members of one shared subscription on A and B, 200
// messages published on C over 8 topics: each message reaches exactly one
// member, and both members get a share. QoS 0, 1 and 2.
func TestSharedSubscriptionAcrossInstances(t *testing.T) {
	for _, qos := range []byte{0, 1, 2} {
		t.Run(fmt.Sprintf("qos%d", qos), func(t *testing.T) {
			in := threeInstances(t)
			tag := randHex(4)
			const n, topics = 200, 8
			pub := connectPaho(t, in[2].MQTTAddr(), "shpub-"+tag)
			names := shareTopics(t, pub, "sh"+tag, topics)
			key := "$share/g" + tag + "/sh" + tag + "/+"
			var got [2]seqCollector
			for i := range 2 {
				shareMember(t, in[i], fmt.Sprintf("shm%d-%s", i, tag), key, qos, &got[i])
			}
			waitSplit(t, key, topics, in[0], in[1])
			for i := range n {
				if tok := pub.Publish(names[i%topics], qos, false, strconv.Itoa(i)); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
					t.Fatalf("publish %d: %v", i, tok.Error())
				}
			}
			waitCovered(t, n, 30*time.Second, &got[0], &got[1])
			time.Sleep(500 * time.Millisecond) // a second copy would come now
			c := counts(n, &got[0], &got[1])
			for i, k := range c {
				if k != 1 {
					t.Fatalf("message %d reached the group %d times, want once (A %v, B %v)", i, k, got[0].snapshot(), got[1].snapshot())
				}
			}
			a, b := len(got[0].snapshot()), len(got[1].snapshot())
			if a == 0 || b == 0 {
				t.Fatalf("one member got everything: A %d, B %d", a, b)
			}
			t.Logf("QoS %d: A %d, B %d of %d", qos, a, b, n)
		})
	}
}

// TestSharedSubscriptionMemberLeaves: members on A and B, a publisher on C
// sending 300 QoS 1 messages; A's member acknowledges nothing, and after
// 100 it disconnects and a new member joins on C. Every message reaches a
// member that acknowledges it; a message twice only if A's member had it
// unacknowledged.
func TestSharedSubscriptionMemberLeaves(t *testing.T) {
	in := threeInstances(t)
	tag := randHex(4)
	const n, topics = 300, 8
	pub := connectPaho(t, in[2].MQTTAddr(), "shpub-"+tag)
	names := shareTopics(t, pub, "sl"+tag, topics)
	key := "$share/g" + tag + "/sl" + tag + "/+"
	var got [3]seqCollector
	a := shareMember(t, in[0], "sla-"+tag, key, 1, &got[0], func(o *pahov3.ClientOptions) { o.SetAutoAckDisabled(true) })
	shareMember(t, in[1], "slb-"+tag, key, 1, &got[1])
	waitSplit(t, key, topics, in[0], in[1])
	for i := range n {
		if i == 100 {
			if len(got[0].snapshot()) == 0 {
				t.Fatal("A's member got nothing of the first 100")
			}
			a.Disconnect(0)
			shareMember(t, in[2], "slc-"+tag, key, 1, &got[2])
			// A leaves the group, C joins it: the rest is for B and C.
			waitSplit(t, key, topics, in[1], in[2])
		}
		if tok := pub.Publish(names[i%topics], 1, false, strconv.Itoa(i)); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %d: %v", i, tok.Error())
		}
		time.Sleep(2 * time.Millisecond)
	}
	waitCovered(t, n, 60*time.Second, &got[1], &got[2]) // the members that acknowledge
	time.Sleep(500 * time.Millisecond)
	unacked := map[int]bool{}
	for _, v := range got[0].snapshot() {
		unacked[v] = true
	}
	for i, k := range counts(n, &got[1], &got[2]) {
		if k > 1 {
			t.Fatalf("message %d reached the acknowledging members %d times", i, k)
		}
	}
	dups := 0
	for i, k := range counts(n, &got[0], &got[1], &got[2]) {
		if k > 1 && !unacked[i] {
			t.Fatalf("message %d came %d times, although A's member never had it", i, k)
		}
		dups += k - 1
	}
	if len(got[2].snapshot()) == 0 {
		t.Fatal("the member that joined on C got nothing")
	}
	t.Logf("A %d (unacknowledged), B %d, C %d; %d redelivered", len(got[0].snapshot()), len(got[1].snapshot()), len(got[2].snapshot()), dups)
}

// TestSharedSubscriptionSessionResumes: a persistent MQTT 5 session whose
// only subscription is shared goes offline on A; what is published
// meanwhile waits in the group (nobody acknowledged it) and reaches the
// session when it resumes on B, without subscribing again.
func TestSharedSubscriptionSessionResumes(t *testing.T) {
	in := threeInstances(t)
	tag := randHex(4)
	const n = 20
	pub := connectPaho(t, in[2].MQTTAddr(), "srpub-"+tag)
	names := shareTopics(t, pub, "sr"+tag, 1)
	key := "$share/g" + tag + "/sr" + tag + "/+"
	id := "srm-" + tag
	persistent := func(_ *paho.ClientConfig, cp *paho.Connect) {
		cp.CleanStart = false
		cp.Properties = &paho.ConnectProperties{SessionExpiryInterval: ptr(uint32(300))}
	}
	var got seqCollector
	handler := func(cc *paho.ClientConfig, _ *paho.Connect) {
		cc.OnPublishReceived = []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			got.add(pr.Packet.Payload)
			return true, nil
		}}
	}
	c := connectV5(t, in[0].MQTTAddr(), id, persistent, handler)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: key, QoS: 1}}}); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	waitSplit(t, key, 1, in[0])
	if tok := pub.Publish(names[0], 1, false, "0"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish: %v", tok.Error())
	}
	waitCovered(t, 1, 20*time.Second, &got)
	_ = c.Disconnect(&paho.Disconnect{ReasonCode: 0})
	waitFor(t, 20*time.Second, "the session offline", func() bool { return sessionOffline(in[0], id) })
	for i := 1; i < n; i++ {
		if tok := pub.Publish(names[0], 1, false, strconv.Itoa(i)); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %d: %v", i, tok.Error())
		}
	}
	c2 := connectV5(t, in[1].MQTTAddr(), id, persistent, handler)
	defer c2.Disconnect(&paho.Disconnect{})
	waitCovered(t, n, 60*time.Second, &got)
}

// TestSharedSubscriptionInstanceKilled: members on processes A and B, a
// publisher on C sending 400 QoS 1 messages; A is killed with SIGKILL
// after 150. Kafka drops A from the group after share.session_timeout
// (6 s here) and B reads A's partitions from their committed offsets:
// every message reaches a member (what A's member had and A had not
// committed comes again), and A's partitions are delivered again within
// the session timeout and a bounded margin.
func TestSharedSubscriptionInstanceKilled(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	run := randHex(3)
	env := func(inst string) []string {
		return []string{"FERRY_KAFKA_BROKERS=" + brokers, "FERRY_INSTANCE_ID=shk" + inst + "-" + run,
			"FERRY_SHARE_SESSION_TIMEOUT=6s"}
	}
	a, b, c := startFerry(t, "a", "", env("a")...), startFerry(t, "b", "", env("b")...), startFerry(t, "c", "", env("c")...)
	const n, topics = 400, 8
	pub := connectPaho(t, c.MQTTAddr, "shkpub-"+run)
	names := shareTopics(t, pub, "shk"+run, topics)
	key := "$share/g" + run + "/shk" + run + "/+"
	type arrival struct {
		at time.Time
		on int
	}
	var mu sync.Mutex
	arrivals := map[int][]arrival{}
	member := func(p *ferryProcess, on int) {
		connectPaho(t, p.MQTTAddr, fmt.Sprintf("shkm%d-%s", on, run), func(o *pahov3.ClientOptions) {
			o.SetDefaultPublishHandler(func(_ pahov3.Client, m pahov3.Message) {
				if i, err := strconv.Atoi(string(m.Payload())); err == nil {
					mu.Lock()
					arrivals[i] = append(arrivals[i], arrival{time.Now(), on})
					mu.Unlock()
				}
			})
		}).Subscribe(key, 1, nil).WaitTimeout(10 * time.Second)
	}
	member(a, 0)
	member(b, 1)
	series := `ferry_share_partitions{group="` + key + `"}`
	waitFor(t, 60*time.Second, "the group's partitions split between A and B", func() bool {
		pa, pb := a.metric(series), b.metric(series)
		return pa >= 1 && pb >= 1 && pa+pb == topics
	})
	var killed time.Time
	for i := range n {
		if i == 150 {
			a.kill9()
			killed = time.Now()
		}
		if tok := pub.Publish(names[i%topics], 1, false, strconv.Itoa(i)); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %d: %v", i, tok.Error())
		}
		time.Sleep(5 * time.Millisecond)
	}
	ofA := map[int]bool{} // topics A's member had messages of
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		missing := []int{}
		for i := range n {
			if len(arrivals[i]) == 0 {
				missing = append(missing, i)
			}
		}
		for i, as := range arrivals {
			if as[0].on == 0 {
				ofA[i%topics] = true
			}
		}
		mu.Unlock()
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages never reached a member: %v", len(missing), n, missing[:min(len(missing), 20)])
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	var back time.Time // the first delivery on B of one of A's topics after the kill
	dups := 0
	for i, as := range arrivals {
		dups += len(as) - 1
		for _, ar := range as {
			if ar.on == 1 && ofA[i%topics] && ar.at.After(killed) && (back.IsZero() || ar.at.Before(back)) {
				back = ar.at
			}
		}
	}
	took := back.Sub(killed)
	t.Logf("A's %d topics delivered again by B %v after the kill (session timeout 6s); %d duplicates", len(ofA), took, dups)
	if len(ofA) == 0 || back.IsZero() {
		t.Fatal("A's member had nothing before the kill, or B never took A's partitions over")
	}
	if took > 6*time.Second+10*time.Second {
		t.Fatalf("A's partitions delivered again %v after the kill, want within the session timeout (6s) and a margin", took)
	}
}

// TestSharedSubscriptionACLDenied: the only member's read ACL denies one
// topic its shared filter covers. That topic's messages are not owed to
// it (as to a plain subscriber) and do not stop the group: a message of
// another topic published after them arrives.
func TestSharedSubscriptionACLDenied(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	tag := randHex(4)
	prefix := "sd" + tag
	cfg := testConfig(brokers)
	cfg.MQTT.Anonymous = ACL{DenySubscribe: []string{prefix + "/secret"}}
	b := startBridge(t, cfg)
	pub := connectPaho(t, b.MQTTAddr(), "sdpub-"+tag)
	names := []string{prefix + "/secret", prefix + "/ok"}
	for _, name := range names {
		if tok := pub.Publish(name, 1, false, "w"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("warm-up publish: %v", tok.Error())
		}
	}
	key := "$share/g" + tag + "/" + prefix + "/+"
	var got seqCollector
	shareMember(t, b, "sdm-"+tag, key, 1, &got)
	waitSplit(t, key, 2, b)
	for i, name := range []string{names[0], names[0], names[1]} {
		if tok := pub.Publish(name, 1, false, strconv.Itoa(i)); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %d: %v", i, tok.Error())
		}
	}
	waitFor(t, 20*time.Second, "the allowed topic's message", func() bool { return slices.Contains(got.snapshot(), 2) })
	if s := got.snapshot(); slices.Contains(s, 0) || slices.Contains(s, 1) {
		t.Fatalf("the member got a message its ACL denies: %v", s)
	}
}

// TestSharedSubscriptionReverseTopic: records a Kafka producer writes to a
// reverse topic whose name does not decode to its MQTT topic (a reverse
// rule maps it) reach a shared subscription: each once, across the two
// instances with members, although both consume the topic for their plain
// subscribers.
func TestSharedSubscriptionReverseTopic(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	tag := randHex(4)
	k, m := "ferrytest-events."+tag, "sv"+tag+"/events"
	var in [2]*Bridge
	for i := range in {
		cfg := testConfig(brokers)
		cfg.Reverse.Topics = []string{k}
		cfg.Topics.Reverse = []topicmap.ReverseRule{{Kafka: k, MQTT: m}}
		cfg.State.SessionsTopic, cfg.State.RetainedTopic = "_ferry_sessions_sv"+tag, "_ferry_retained_sv"+tag
		in[i] = startBridge(t, cfg)
	}
	prod := kgoProducer(t, brokers)
	if _, err := kadm.NewClient(prod).CreateTopic(context.Background(), 4, 1, nil, k); err != nil {
		t.Fatal(err)
	}
	key := "$share/g" + tag + "/" + m
	var got [2]seqCollector
	for i := range in {
		shareMember(t, in[i], fmt.Sprintf("svm%d-%s", i, tag), key, 1, &got[i])
	}
	waitSplit(t, key, 4, in[0], in[1])
	const n = 100
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: k, Partition: int32(i % 4), Value: []byte(strconv.Itoa(i))}
	}
	produceAll(t, prod, recs)
	waitCovered(t, n, 30*time.Second, &got[0], &got[1])
	time.Sleep(500 * time.Millisecond)
	for i, c := range counts(n, &got[0], &got[1]) {
		if c != 1 {
			t.Fatalf("record %d reached the group %d times, want once", i, c)
		}
	}
}
