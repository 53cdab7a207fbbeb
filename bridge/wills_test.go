package bridge

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	pahov3 "github.com/eclipse/paho.mqtt.golang"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
	"github.com/ferry-bridge/ferry/session"
	"github.com/ferry-bridge/ferry/topicmap"
)

// Short liveness settings for the tests: an instance is dead 2 s after its
// last heartbeat.
const (
	testBeat  = 250 * time.Millisecond
	testLapse = 2 * time.Second
)

func willEnv(brokers, inst string) []string {
	return []string{"FERRY_KAFKA_BROKERS=" + brokers, "FERRY_INSTANCE_ID=" + inst + "-" + randHex(3),
		"FERRY_STATE_HEARTBEAT_INTERVAL=" + testBeat.String(), "FERRY_STATE_INSTANCE_LAPSE=" + testLapse.String()}
}

// willsPublished reads ferry_wills_published_total{reason="dead_instance"}
// of an in-process bridge.
func willsPublished(t *testing.T, b *Bridge) float64 {
	t.Helper()
	mfs, err := b.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "ferry_wills_published_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == "dead_instance" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatal(`no ferry_wills_published_total{reason="dead_instance"}`)
	return 0
}

// willInbox records the messages a subscriber gets, per topic, with the
// time each arrived.
type willInbox struct {
	mu  sync.Mutex
	got map[string][]time.Time
	pay map[string]string
}

func newWillInbox() *willInbox {
	return &willInbox{got: map[string][]time.Time{}, pay: map[string]string{}}
}

func (w *willInbox) add(topic, payload string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got[topic] = append(w.got[topic], time.Now())
	w.pay[topic] = payload
}

func (w *willInbox) count(topic string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.got[topic])
}

func (w *willInbox) first(topic string) (time.Time, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.got[topic]) == 0 {
		return time.Time{}, ""
	}
	return w.got[topic][0], w.pay[topic]
}

// subscribeWills subscribes a v3.1.1 client on addr to filter.
func subscribeWills(t *testing.T, addr, filter string) *willInbox {
	t.Helper()
	in := newWillInbox()
	sub := connectPaho(t, addr, "sub-"+randHex(4))
	tok := sub.Subscribe(filter, 1, func(_ pahov3.Client, m pahov3.Message) { in.add(m.Topic(), string(m.Payload())) })
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe %s: %v", filter, tok.Error())
	}
	return in
}

// connectWithWill connects an MQTT 3.1.1 client (clean session when clean)
// with a QoS 1 Will.
func connectWithWill(t *testing.T, addr, id string, clean bool, topic, payload string) pahov3.Client {
	t.Helper()
	return connectPaho(t, addr, id, func(o *pahov3.ClientOptions) {
		o.SetCleanSession(clean).SetWill(topic, payload, 1, false).SetKeepAlive(30 * time.Second)
	})
}

// connectV5WithWill connects an MQTT 5 client: session expiry 60 s, a QoS 1
// Will with the given delay (seconds).
func connectV5WithWill(t *testing.T, addr, id, topic, payload string, delay uint32) {
	t.Helper()
	cp := &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: true,
		Properties:     &paho.ConnectProperties{SessionExpiryInterval: ptr[uint32](60)},
		WillMessage:    &paho.WillMessage{Topic: topic, Payload: []byte(payload), QoS: 1},
		WillProperties: &paho.WillProperties{WillDelayInterval: ptr(delay)}}
	if _, ca := dialV5(t, addr, paho.ClientConfig{ClientID: id}, cp); ca.ReasonCode != 0 {
		t.Fatalf("v5 connect: reason 0x%x", ca.ReasonCode)
	}
}

// noMore fails if topic gets more than n messages within d.
func noMore(t *testing.T, in *willInbox, topics map[string]int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		for topic, n := range topics {
			if c := in.count(topic); c > n {
				t.Fatalf("%s: %d messages, want %d", topic, c, n)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestWillOfKilledInstance: clients with Wills are connected to instance a
// (cmd/bridge, on an in-process kfake); a is killed (-9). Instance b (in
// this process) publishes each Will once, to its subscriber, once a's
// heartbeat has lapsed: an MQTT 3.1.1 clean session (its record is then
// deleted), a persistent one (its record says disconnected, fenced by b),
// and an MQTT 5 Will with a Will Delay Interval of 5 s (not before it).
func TestWillOfKilledInstance(t *testing.T) {
	fake, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	brokers := strings.Join(fake.ListenAddrs(), ",")

	cb := testConfig(brokers)
	useStateEnv(t, &cb)
	cb.State.HeartbeatInterval, cb.State.InstanceLapse = testBeat, testLapse
	b := startBridge(t, cb)
	// x is of another cluster on the same Kafka (its own sessions topic):
	// alive, but never a candidate for a's Wills.
	cx := testConfig(brokers)
	cx.State.HeartbeatInterval, cx.State.InstanceLapse = testBeat, testLapse
	startBridge(t, cx)
	a := startFerry(t, "a", "", willEnv(brokers, "a")...)

	base := "will/" + randHex(4)
	in := subscribeWills(t, b.MQTTAddr(), base+"/#")
	ids := map[string]string{"persistent": "p-" + randHex(3), "v5": "v-" + randHex(3)}
	for i := 0; ids["clean"] == ""; i++ { // one x would be chosen for if it were a candidate
		if id := fmt.Sprintf("c-%d-%s", i, randHex(3)); session.ChooseInstance(id, []string{cb.Instance.ID, cx.Instance.ID}) == cx.Instance.ID {
			ids["clean"] = id
		}
	}
	connectWithWill(t, a.MQTTAddr, ids["clean"], true, base+"/clean", "gone clean")
	connectWithWill(t, a.MQTTAddr, ids["persistent"], false, base+"/persistent", "gone persistent")
	connectV5WithWill(t, a.MQTTAddr, ids["v5"], base+"/v5", "gone v5", 5)
	waitFor(t, 10*time.Second, "b reads the three claims of a", func() bool {
		for _, id := range ids {
			if s := b.stateEngine.Lookup(id); s == nil || !s.Connected {
				return false
			}
		}
		return true
	})

	a.kill9()
	killed := time.Now()
	waitFor(t, testLapse+10*time.Second, "the Wills of the clean and persistent sessions on b", func() bool {
		return in.count(base+"/clean") > 0 && in.count(base+"/persistent") > 0
	})
	for _, k := range []string{"clean", "persistent"} {
		at, p := in.first(base + "/" + k)
		if p != "gone "+k {
			t.Fatalf("%s Will payload %q", k, p)
		}
		t.Logf("%s Will on b %s after the kill (lapse %s)", k, at.Sub(killed).Round(time.Millisecond), testLapse)
	}
	waitFor(t, 5*time.Second+10*time.Second, "the MQTT 5 Will on b", func() bool { return in.count(base+"/v5") > 0 })
	at, _ := in.first(base + "/v5")
	if d := at.Sub(killed); d < 5*time.Second-testBeat-time.Second/2 {
		t.Fatalf("MQTT 5 Will with a 5 s Will Delay Interval published %s after the kill", d)
	}
	t.Logf("v5 Will (delay 5 s) on b %s after the kill", at.Sub(killed).Round(time.Millisecond))
	// Exactly once: nothing more for two lapses.
	noMore(t, in, map[string]int{base + "/clean": 1, base + "/persistent": 1, base + "/v5": 1}, 2*testLapse)
	if n := willsPublished(t, b); n != 3 {
		t.Fatalf(`ferry_wills_published_total{reason="dead_instance"} = %v, want 3`, n)
	}

	table := readTable(t, cb.Kafka.Brokers, cb.State.SessionsTopic)
	if s := sessionIn(t, table, ids["clean"]); s != nil {
		t.Fatalf("clean session's record after its Will: %+v, want deleted", s)
	}
	for _, k := range []string{"persistent", "v5"} {
		s := sessionIn(t, table, ids[k])
		if s == nil || s.Connected || s.WillBy != cb.Instance.ID || s.Disconnected == 0 {
			t.Fatalf("%s session's record after its Will: %+v, want disconnected, fenced by %s", k, s, cb.Instance.ID)
		}
	}
}

// TestWillOfKilledInstanceKill9: three cmd/bridge processes on the real
// Kafka, each consuming the Wills' Kafka topics (reverse path). An MQTT
// 3.1.1 and an MQTT 5 client with Wills connect to a; a subscriber is on b;
// a is killed (-9). Each Will reaches b's subscriber exactly once (whichever
// survivor publishes it). A third client of a that reconnects to c before
// the lapse gets no Will published.
func TestWillOfKilledInstanceKill9(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	base := "ferrytest/will" + randHex(4)
	topics := []string{base + "/v3", base + "/v5", base + "/back"}
	var kafkaTopics []string
	for _, mt := range topics {
		kt, err := topicmap.EncodeTopic(mt)
		if err != nil {
			t.Fatal(err)
		}
		kafkatest.CreateTopic(t, brokers, kt, 1, nil)
		kafkaTopics = append(kafkaTopics, kt)
	}
	env := func(inst string) []string {
		return append(willEnv(brokers, inst), "FERRY_REVERSE_TOPICS="+strings.Join(kafkaTopics, ","),
			"FERRY_REVERSE_START_OFFSET=earliest")
	}
	a := startFerry(t, "a", "", env("a")...)
	b := startFerry(t, "b", "", append(env("b"), "FERRY_LOG_LEVEL=debug")...)
	c := startFerry(t, "c", "", append(env("c"), "FERRY_LOG_LEVEL=debug")...)
	defer func() {
		if t.Failed() {
			for _, p := range []*ferryProcess{b, c} {
				var lines []string
				for _, l := range strings.Split(p.stderr.String(), "\n") {
					if strings.Contains(l, "component=wills") || strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
						lines = append(lines, l)
					}
				}
				t.Logf("%s's log (wills, warnings):\n%s", p.name, strings.Join(lines, "\n"))
			}
		}
	}()

	in := subscribeWills(t, b.MQTTAddr, base+"/#")
	backID, v3ID, v5ID := "back-"+randHex(3), "v3-"+randHex(3), "v5-"+randHex(3)
	connectWithWill(t, a.MQTTAddr, v3ID, true, base+"/v3", "gone v3")
	connectV5WithWill(t, a.MQTTAddr, v5ID, base+"/v5", "gone v5", 0)
	connectWithWill(t, a.MQTTAddr, backID, true, base+"/back", "gone back")
	// Clean sessions' claims are written without waiting: kill a once the
	// three are in Kafka.
	var sessions string
	for _, kv := range stateEnv(t) {
		if v, ok := strings.CutPrefix(kv, "FERRY_STATE_SESSIONS_TOPIC="); ok {
			sessions = v
		}
	}
	waitFor(t, 10*time.Second, "the three claims in Kafka", func() bool {
		table := readTable(t, strings.Split(brokers, ","), sessions)
		for _, id := range []string{backID, v3ID, v5ID} {
			if s := sessionIn(t, table, id); s == nil || !s.Connected {
				return false
			}
		}
		return true
	})

	a.kill9()
	killed := time.Now()
	// The client is back, on c, well within the lapse.
	connectWithWill(t, c.MQTTAddr, backID, true, base+"/back", "gone back")
	waitFor(t, testLapse+15*time.Second, "the MQTT 3.1.1 and MQTT 5 Wills on b", func() bool {
		return in.count(base+"/v3") > 0 && in.count(base+"/v5") > 0
	})
	for _, k := range []string{"v3", "v5"} {
		at, p := in.first(base + "/" + k)
		if p != "gone "+k {
			t.Fatalf("%s Will payload %q", k, p)
		}
		t.Logf("%s Will on b %s after kill -9 of a (lapse %s)", k, at.Sub(killed).Round(time.Millisecond), testLapse)
	}
	noMore(t, in, map[string]int{base + "/v3": 1, base + "/v5": 1, base + "/back": 0}, 2*testLapse)
	total := 0.0
	for _, p := range []*ferryProcess{b, c} {
		total += p.metric(`ferry_wills_published_total{reason="dead_instance"}`)
	}
	if total != 2 {
		t.Fatalf(`ferry_wills_published_total{reason="dead_instance"} on b and c: %v, want 2`, total)
	}
}

// TestWillOfRestartedInstance: instance a (cmd/bridge) is killed (-9) and
// restarted with the same instance id before its heartbeat lapses, so b
// never counts it dead. The restarted a publishes the Will of the client
// its dead run held, once (b publishes none).
func TestWillOfRestartedInstance(t *testing.T) {
	fake, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	brokers := strings.Join(fake.ListenAddrs(), ",")
	// Longer than a restart takes, also on a loaded machine (the kill, a's
	// start until ready, its Will through Kafka to b: past the lapse b
	// rightly counts a dead and publishes the Will itself). A pass does not
	// wait for it.
	const lapse = 30 * time.Second
	cb := testConfig(brokers)
	useStateEnv(t, &cb)
	cb.State.HeartbeatInterval, cb.State.InstanceLapse = testBeat, lapse
	// The restarted a publishes the Will: it reaches b's subscriber through
	// Kafka (b's reverse path).
	base := "will/" + randHex(4)
	kt, err := topicmap.EncodeTopic(base + "/r")
	if err != nil {
		t.Fatal(err)
	}
	kafkatest.CreateTopic(t, brokers, kt, 1, nil)
	cb.Reverse.Topics, cb.Reverse.StartOffset = []string{kt}, "earliest"
	b := startBridge(t, cb)
	env := append(willEnv(brokers, "a"), "FERRY_STATE_INSTANCE_LAPSE="+lapse.String())
	a := startFerry(t, "a", "", env...)

	in := subscribeWills(t, b.MQTTAddr(), base+"/#")
	id := "r-" + randHex(3)
	connectWithWill(t, a.MQTTAddr, id, true, base+"/r", "gone r")
	waitFor(t, 10*time.Second, "b reads a's claim", func() bool {
		s := b.stateEngine.Lookup(id)
		return s != nil && s.Connected
	})
	a.kill9()
	killed := time.Now()
	a.start() // same instance id
	waitFor(t, lapse, "the Will on b, before a's lapse", func() bool { return in.count(base+"/r") > 0 })
	t.Logf("Will on b %s after the kill (a restarted; lapse %s)", time.Since(killed).Round(time.Millisecond), lapse)
	if n := a.metric(`ferry_wills_published_total{reason="dead_instance"}`); n != 1 {
		t.Fatalf(`restarted a: ferry_wills_published_total{reason="dead_instance"} = %v, want 1`, n)
	}
	noMore(t, in, map[string]int{base + "/r": 1}, 2*time.Second)
	if n := willsPublished(t, b); n != 0 {
		t.Fatalf(`b: ferry_wills_published_total{reason="dead_instance"} = %v, want 0`, n)
	}
	if s := sessionIn(t, readTable(t, cb.Kafka.Brokers, cb.State.SessionsTopic), id); s != nil {
		t.Fatalf("clean session's record after its Will: %+v, want deleted", s)
	}
}

// TestWillOfSilentInstanceDropsItsClient: instance a stops heartbeating
// but keeps serving (as if cut off from the heartbeats only). b publishes
// the Will of a's client once the lapse passed, and a, reading b's fence,
// disconnects that client: no client stays served after its Will was
// published.
func TestWillOfSilentInstanceDropsItsClient(t *testing.T) {
	fake, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	brokers := strings.Join(fake.ListenAddrs(), ",")
	ca, cb := testConfig(brokers), testConfig(brokers)
	cb.State.SessionsTopic, cb.State.RetainedTopic = ca.State.SessionsTopic, ca.State.RetainedTopic
	for _, c := range []*Config{&ca, &cb} {
		c.State.HeartbeatInterval, c.State.InstanceLapse = testBeat, testLapse
	}
	a, b := startBridge(t, ca), startBridge(t, cb)
	base := "will/" + randHex(4)
	in := subscribeWills(t, b.MQTTAddr(), base+"/#")
	id := "s-" + randHex(3)
	lost := make(chan struct{})
	connectPaho(t, a.MQTTAddr(), id, func(o *pahov3.ClientOptions) {
		o.SetCleanSession(true).SetWill(base+"/s", "gone s", 1, false).SetKeepAlive(30 * time.Second).
			SetConnectionLostHandler(func(pahov3.Client, error) { close(lost) })
	})
	waitFor(t, 10*time.Second, "b reads a's claim", func() bool {
		s := b.stateEngine.Lookup(id)
		return s != nil && s.Connected
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.instance.Close(ctx); err != nil { // a's heartbeats stop; its broker serves on
		t.Fatal(err)
	}
	waitFor(t, testLapse+10*time.Second, "the Will on b", func() bool { return in.count(base+"/s") > 0 })
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("a still serves the client 10 s after b published its Will")
	}
	if n := willsPublished(t, b); n != 1 {
		t.Fatalf(`b: ferry_wills_published_total{reason="dead_instance"} = %v, want 1`, n)
	}
}
