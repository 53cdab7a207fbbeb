package bridge

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	pahov3 "github.com/eclipse/paho.mqtt.golang"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
	"github.com/ferry-bridge/ferry/topicmap"
)

// seqInbox collects payloads "<stream>-<n>" in arrival order.
type seqInbox struct {
	mu   sync.Mutex
	got  []string
	dups int
}

func (in *seqInbox) add(payload string, dup bool) {
	in.mu.Lock()
	in.got = append(in.got, payload)
	if dup {
		in.dups++
	}
	in.mu.Unlock()
}

func (in *seqInbox) snapshot() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]string(nil), in.got...)
}

// checkStreams: for each stream, 0..n-1 all arrived, each first arrival in
// order (a redelivered duplicate may repeat an earlier one). It returns the
// number of duplicates.
func checkStreams(t *testing.T, got []string, n int, streams ...string) int {
	t.Helper()
	dups, err := streamsInOrder(got, n, streams...)
	if err != nil {
		t.Fatal(err)
	}
	return dups
}

// streamsInOrder is checkStreams without the test: payloads "<stream>-<n>"
// of other streams are ignored; it returns the duplicates and the first
// problem found (a message missing, or a first arrival out of order).
func streamsInOrder(got []string, n int, streams ...string) (int, error) {
	type progress struct {
		seen map[int]bool
		next int
	}
	want := make(map[string]*progress, len(streams))
	for _, s := range streams {
		want[s] = &progress{seen: map[int]bool{}}
	}
	dups := 0
	for _, p := range got {
		i := strings.LastIndexByte(p, '-')
		if i < 0 {
			continue
		}
		st := want[p[:i]]
		k, err := strconv.Atoi(p[i+1:])
		if st == nil || err != nil {
			continue
		}
		if st.seen[k] {
			dups++
			continue
		}
		if k != st.next {
			return dups, fmt.Errorf("stream %s: got %d where %d was next (out of order or missing)", p[:i], k, st.next)
		}
		st.seen[k] = true
		st.next++
	}
	for _, s := range streams {
		if want[s].next != n {
			return dups, fmt.Errorf("stream %s: %d of %d arrived", s, want[s].next, n)
		}
	}
	return dups, nil
}

// TestSessionSurvivesKill9AcrossInstances (the state issue's proof): three
// cmd/bridge processes share a real Kafka and nothing else. A persistent
// session subscribes on a; a is killed (-9) 0.2 s after the SUBACK. While
// the session has no connection, 100 QoS 1 messages are published on b and
// 100 records are produced to a reverse topic; a message retained on b is
// PUBACKed and b is killed (-9) at once. The client reconnects to c without
// subscribing: Session Present 1, all 200 messages in order per topic, and
// c serves the retained message. MQTT 3.1.1 and 5.
func TestSessionSurvivesKill9AcrossInstances(t *testing.T) {
	for _, v5 := range []bool{false, true} {
		name := "v311"
		if v5 {
			name = "v5"
		}
		t.Run(name, func(t *testing.T) { sessionKill9(t, v5) })
	}
}

func sessionKill9(t *testing.T, v5 bool) {
	brokers := kafkatest.Brokers(t)
	id := "dev" + randHex(4)
	base := "ferrytest/" + id
	fwd, rev, retained := base+"/fwd", base+"/rev", base+"/cfg"
	revTopic, err := topicmap.EncodeTopic(rev)
	if err != nil {
		t.Fatal(err)
	}
	kafkatest.CreateTopic(t, brokers, revTopic, 1, nil)
	env := func(inst string) []string {
		return []string{"FERRY_KAFKA_BROKERS=" + brokers, "FERRY_INSTANCE_ID=" + inst + "-" + randHex(3),
			"FERRY_REVERSE_TOPICS=" + revTopic, "FERRY_REVERSE_START_OFFSET=earliest"}
	}
	a := startFerry(t, "a", "", env("a")...)
	b := startFerry(t, "b", "", env("b")...)
	c := startFerry(t, "c", "", append(env("c"), "FERRY_LOG_LEVEL=info")...)
	defer func() {
		if t.Failed() {
			t.Logf("c's log:\n%s", c.stderr.String())
		}
	}()

	// 1. Subscribe on a; kill a 0.2 s after the SUBACK.
	in := &seqInbox{}
	var sessionPresent bool
	if v5 {
		cp := &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: false,
			Properties: &paho.ConnectProperties{SessionExpiryInterval: ptr[uint32](600)}}
		sub, _ := dialV5(t, a.MQTTAddr, paho.ClientConfig{ClientID: id}, cp)
		mustSubscribe(t, sub, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: base + "/#", QoS: 1}}})
	} else {
		sub := connectPaho(t, a.MQTTAddr, id, func(o *pahov3.ClientOptions) { o.SetCleanSession(false) })
		if tok := sub.Subscribe(base+"/#", 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("subscribe: %v", tok.Error())
		}
	}
	time.Sleep(200 * time.Millisecond)
	a.kill9()

	// 2. While the session has no connection: 100 QoS 1 publishes on b,
	// 100 records to the reverse topic.
	pub := connectPaho(t, b.MQTTAddr, "pub-"+randHex(4))
	var toks []pahov3.Token
	for i := range 100 {
		toks = append(toks, pub.Publish(fwd, 1, false, fmt.Sprintf("b-%d", i)))
	}
	for i, tok := range toks {
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %d on b: %v", i, tok.Error())
		}
	}
	var recs []*kgo.Record
	for i := range 100 {
		recs = append(recs, &kgo.Record{Topic: revTopic, Key: []byte("k"), Value: []byte(fmt.Sprintf("r-%d", i))})
	}
	produceAll(t, kgoProducer(t, brokers), recs)

	// 3. A retained message PUBACKed on b; b killed at once.
	if tok := pub.Publish(retained, 1, true, "kept"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("retained publish: %v", tok.Error())
	}
	b.kill9()

	// 4. Reconnect to c, no SUBSCRIBE.
	start := time.Now()
	if v5 {
		cp := &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: false,
			Properties: &paho.ConnectProperties{SessionExpiryInterval: ptr[uint32](600)}}
		_, ca := dialV5(t, c.MQTTAddr, paho.ClientConfig{ClientID: id, OnPublishReceived: []func(paho.PublishReceived) (bool, error){
			func(pr paho.PublishReceived) (bool, error) {
				in.add(string(pr.Packet.Payload), pr.Packet.Duplicate())
				return true, nil
			}}}, cp)
		sessionPresent = ca.SessionPresent
	} else {
		cl := pahov3.NewClient(pahov3.NewClientOptions().AddBroker("tcp://" + c.MQTTAddr).SetClientID(id).
			SetCleanSession(false).SetAutoReconnect(false).SetOrderMatters(true).
			SetDefaultPublishHandler(func(_ pahov3.Client, m pahov3.Message) { in.add(string(m.Payload()), m.Duplicate()) }))
		tok := cl.Connect()
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("reconnect to c: %v", tok.Error())
		}
		t.Cleanup(func() { cl.Disconnect(100) })
		sessionPresent = tok.(*pahov3.ConnectToken).SessionPresent()
	}
	if !sessionPresent {
		t.Fatal("reconnect to c: Session Present 0, want 1")
	}
	var first time.Duration
	waitFor(t, 30*time.Second, "200 messages on c", func() bool {
		got := in.snapshot()
		if first == 0 && len(got) > 0 {
			first = time.Since(start)
		}
		n := 0
		seen := map[string]bool{}
		for _, p := range got {
			if !seen[p] && (strings.HasPrefix(p, "b-") || strings.HasPrefix(p, "r-")) {
				seen[p] = true
				n++
			}
		}
		return n >= 200
	})
	dups := checkStreams(t, in.snapshot(), 100, "b", "r")
	t.Logf("resumed on c: 200 of 200 in order, %d duplicates, first message %s after CONNECT", dups, first.Round(time.Millisecond))

	// 5. c serves the message retained on the killed b.
	got := make(chan string, 1)
	rs := connectPaho(t, c.MQTTAddr, "ret-"+randHex(4))
	rs.Subscribe(retained, 1, func(_ pahov3.Client, m pahov3.Message) {
		select {
		case got <- string(m.Payload()):
		default:
		}
	}).WaitTimeout(10 * time.Second)
	select {
	case m := <-got:
		if m != "kept" {
			t.Fatalf("retained on c: %q", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("c does not serve the message retained on b before b was killed")
	}
}
