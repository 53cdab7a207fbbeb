package bridge

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ferry-bridge/ferry/state"
)

// aclResume is the set-up of the tests of a session resumed by another user
// (issue 31, bug 1): users alice (subscribe: secret/#, open/#, +/plans), bob
// (deny_subscribe: secret/#), carol (deny_subscribe: the test's whole tree)
// and pub (no ACL), bridges a (alice's) and b (the resume's: a again, or
// another instance), and the client id of alice's session.
type aclResume struct {
	t                     *testing.T
	a, b                  *Bridge
	ca                    Config
	id                    string
	root, secret, open    string
	secretF, wideF, openF string
	pubA                  paho.Client
}

func newACLResume(t *testing.T, ca, cb Config, elsewhere bool) *aclResume {
	t.Helper()
	r := &aclResume{t: t, ca: ca, id: "acl-" + randHex(4), root: "ferrytest/acl" + randHex(4)}
	r.secret, r.open = r.root+"/secret/plans", r.root+"/open/plans"
	r.secretF, r.wideF, r.openF = r.root+"/secret/#", r.root+"/+/plans", r.root+"/open/#"
	users := []User{
		{Username: "alice", Password: "a", ACL: ACL{Subscribe: []string{r.secretF, r.openF, r.wideF}}},
		{Username: "bob", Password: "b", ACL: ACL{DenySubscribe: []string{r.secretF}}},
		{Username: "carol", Password: "c", ACL: ACL{DenySubscribe: []string{r.root + "/#"}}},
		{Username: "pub", Password: "p"},
	}
	ca.MQTT.Users, cb.MQTT.Users = users, users
	// Sessions not bound to their user: another user resumes them.
	ca.MQTT.SessionOwner, cb.MQTT.SessionOwner = "off", "off"
	r.a = startBridge(t, ca)
	r.b = r.a
	if elsewhere {
		r.b = startBridge(t, cb)
	}
	r.pubA = connectPaho(t, r.a.MQTTAddr(), "aclpub-"+randHex(4), as("pub", "p"))
	return r
}

// aliceOffline: alice makes a persistent MQTT 3.1.1 session on a,
// subscribes to secret/#, +/plans and open/#, and goes offline with 2
// messages of secret/plans in flight (never acknowledged); 5 more there (the
// last retained) and one on open/plans are published while she is away: 7
// secret records in Kafka.
func (r *aclResume) aliceOffline() {
	t := r.t
	t.Helper()
	var mu sync.Mutex
	got := map[string]bool{} // paho calls each matching filter's handler: a message may come twice
	alice := connectPaho(t, r.a.MQTTAddr(), r.id, as("alice", "a"), func(o *paho.ClientOptions) {
		o.SetCleanSession(false).SetOrderMatters(true).SetAutoAckDisabled(true)
	})
	tok := alice.SubscribeMultiple(map[string]byte{r.secretF: 1, r.wideF: 1, r.openF: 1}, func(_ paho.Client, m paho.Message) {
		mu.Lock()
		got[string(m.Payload())] = true
		mu.Unlock()
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("alice subscribe: %v", tok.Error())
	}
	for f, code := range tok.(*paho.SubscribeToken).Result() {
		if code != 1 {
			t.Fatalf("alice's SUBACK for %s: %#x, want 1 (all: %v)", f, code, tok.(*paho.SubscribeToken).Result())
		}
	}
	for i := range 2 {
		publishQoS1(t, r.pubA, r.secret, fmt.Sprintf("secret-inflight-%d", i), false)
	}
	waitFor(t, 10*time.Second, "alice's 2 deliveries", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 2 })
	alice.Disconnect(100) // the 2 stay in flight: never acknowledged
	waitFor(t, 10*time.Second, "alice's session offline", func() bool {
		return sessionOffline(r.a, r.id)
	})
	for i := range 5 {
		publishQoS1(t, r.pubA, r.secret, fmt.Sprintf("secret-queued-%d", i), i == 4)
	}
	publishQoS1(t, r.pubA, r.open, "open-queued", false)
}

// as sets a paho client's username and password.
func as(user, pass string) func(*paho.ClientOptions) {
	return func(o *paho.ClientOptions) { o.SetUsername(user).SetPassword(pass) }
}

func publishQoS1(t *testing.T, c paho.Client, topic, payload string, retain bool) {
	t.Helper()
	if tok := c.Publish(topic, 1, retain, payload); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish %s: %v", topic, tok.Error())
	}
}

// resume connects user to b with alice's client id, clean session 0, and
// checks Session Present 1. It returns the client and what it receives:
// "topic payload", in arrival order.
func (r *aclResume) resume(user, pass string) (paho.Client, func() []string) {
	t := r.t
	var mu sync.Mutex
	var got []string
	c := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + r.b.MQTTAddr()).SetClientID(r.id).
		SetUsername(user).SetPassword(pass).SetCleanSession(false).SetAutoReconnect(false).SetOrderMatters(true).
		SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) {
			mu.Lock()
			got = append(got, m.Topic()+" "+string(m.Payload()))
			mu.Unlock()
		}))
	tok := c.Connect()
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("%s connect: %v", user, tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(100) })
	if !tok.(*paho.ConnectToken).SessionPresent() {
		t.Fatalf("%s resuming alice's session: Session Present 0, want 1", user)
	}
	return c, func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(got) }
}

// noSecret fails the test if got holds a message of the secret topic, or
// one without a topic name (one its client cannot place).
func (r *aclResume) noSecret(user string, got []string) {
	var leaked []string
	for _, m := range got {
		if p, ok := strings.CutPrefix(m, r.secret+" "); ok {
			leaked = append(leaked, p)
		} else if p, ok := strings.CutPrefix(m, " "); ok {
			leaked = append(leaked, "(no topic name) "+p)
		}
	}
	if len(leaked) > 0 {
		r.t.Fatalf("%s (denied %s) received %d messages of alice's session there: %v", user, r.secret, len(leaked), leaked)
	}
}

// waitRecord polls the session's record in Kafka until it is user's, has
// the filters want, its positions in the secret topic add up to at least
// minPos (7: past all its records) and nothing there is pending (a denied
// message does not hold the session's queue).
func (r *aclResume) waitRecord(user string, want []string, minPos int64) {
	t := r.t
	secretK := kafkaName(t, r.secret)
	var last string
	defer func() {
		if t.Failed() {
			t.Logf("the session's last record read: %s", last)
		}
	}()
	waitFor(t, 15*time.Second, fmt.Sprintf("the session's record: %s's, subscriptions %v, position >= %d in the secret topic, none pending there", user, want, minPos), func() bool {
		rec := sessionIn(t, readTable(t, r.ca.Kafka.Brokers, r.ca.State.SessionsTopic), r.id)
		if rec == nil {
			last = "none"
			return false
		}
		filters := []string{}
		for _, s := range rec.Subs {
			filters = append(filters, s.Filter)
		}
		slices.Sort(filters)
		pos, pending := secretProgress(rec, secretK)
		last = fmt.Sprintf("user %q, subscriptions %v, position %d in %s, %d pending there", rec.Username, filters, pos, secretK, pending)
		return string(rec.Username) == user && slices.Equal(filters, want) && pos >= minPos && pending == 0
	})
}

// secretProgress sums the session's positions in the Kafka topic k (each
// partition's is at most its end: the sum reaches the topic's record count
// only when all are at their ends) and counts its pending deliveries there.
func secretProgress(rec *state.Session, k string) (pos int64, pending int) {
	for _, p := range rec.Positions {
		if p.Topic == k {
			pos += p.Offset
		}
	}
	for _, p := range rec.Pending {
		if p.Topic == k {
			pending++
		}
	}
	return pos, pending
}

// aclResumeModes runs f after aliceOffline, resuming on the same instance
// and on another one, each with kfake and the real Kafka (stateModes).
func aclResumeModes(t *testing.T, f func(t *testing.T, r *aclResume)) {
	for _, elsewhere := range []bool{false, true} {
		name := "same instance"
		if elsewhere {
			name = "other instance"
		}
		t.Run(name, func(t *testing.T) {
			stateModes(t, func(t *testing.T, ca, cb Config) {
				r := newACLResume(t, ca, cb, elsewhere)
				r.aliceOffline()
				f(t, r)
			})
		})
	}
}

// TestResumeUnderOwnACL (issue 31, bug 1): a session is named by its
// client id alone, so another user can resume it; it gets what its own ACL
// allows on every path that delivers to it, as the live path (mochi's
// per-delivery OnACLCheck) always did.
//
// bob (deny_subscribe: secret/#) resumes alice's session (aliceOffline):
// Session Present 1; he gets the open message (from the replay, then a live
// one) and none of the 10 secret ones: not the 2 in flight (resent by mochi
// on the same instance, from the record's pending deliveries by the replay
// on another), not the 5 queued (the replay: +/plans matches secret/plans
// and stays, wider than his deny filter, so each message is checked), not 3
// live ones, nor the retained one when he subscribes to +/plans again.
// secret/# leaves the session: the record bob's instance writes
// has +/plans and open/# only, counted in
// ferry_sessions_resumed_subscriptions_denied_total; the secret partition's
// position moves past its 7 records, nothing of it left pending.
func TestResumeUnderOwnACL(t *testing.T) {
	aclResumeModes(t, func(t *testing.T, r *aclResume) {
		bob, received := r.resume("bob", "b")
		has := func(s string) func() bool { return func() bool { return slices.Contains(received(), s) } }
		waitFor(t, 15*time.Second, "the queued open message at bob", has(r.open+" open-queued"))
		// The replay is over once the subscriptions are live; live messages
		// then come after everything it wrote (OrderMatters: in order).
		waitSubscribers(t, r.b, r.open, 1)
		pub := r.pubA
		if r.b != r.a {
			pub = connectPaho(t, r.b.MQTTAddr(), "aclpub-"+randHex(4), as("pub", "p"))
		}
		for i := range 3 {
			publishQoS1(t, pub, r.secret, fmt.Sprintf("secret-live-%d", i), false)
		}
		publishQoS1(t, pub, r.open, "open-live", false)
		waitFor(t, 15*time.Second, "the live open message at bob", has(r.open+" open-live"))
		// Subscribing again sends the retained messages the filter matches
		// (mochi, checked per message): not the retained secret-queued-4.
		if tok := bob.Subscribe(r.wideF, 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("bob subscribe: %v", tok.Error())
		}
		publishQoS1(t, pub, r.open, "open-live-2", false)
		waitFor(t, 15*time.Second, "the second live open message at bob", has(r.open+" open-live-2"))
		r.noSecret("bob", received())
		if n := metricValue(t, r.b, "ferry_sessions_resumed_subscriptions_denied_total", nil); n != 1 {
			t.Errorf("ferry_sessions_resumed_subscriptions_denied_total = %v, want 1 (%s)", n, r.secretF)
		}
		r.waitRecord("bob", []string{r.wideF, r.openF}, 7)
	})
}

// TestResumeWithEverySubscriptionDenied: carol's ACL denies all three of
// alice's subscriptions. The session resumes with none (Session Present 1),
// so no replay runs; the 2 deliveries alice left in flight are not resent
// (by mochi on the same instance, nor from the record on another) and do
// not stay pending in the record for good. Her own subscription works.
func TestResumeWithEverySubscriptionDenied(t *testing.T) {
	aclResumeModes(t, func(t *testing.T, r *aclResume) {
		c, received := r.resume("carol", "c")
		mine := "ferrytest/carol" + randHex(4)
		if tok := c.Subscribe(mine, 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("carol subscribe: %v", tok.Error())
		}
		// Its message comes after anything resent at the resume (mochi
		// resends right after CONNACK; OrderMatters: in order).
		pub := connectPaho(t, r.b.MQTTAddr(), "aclpub-"+randHex(4), as("pub", "p"))
		publishQoS1(t, pub, mine, "mine", false)
		waitFor(t, 15*time.Second, "carol's own message", func() bool { return slices.Contains(received(), mine+" mine") })
		r.noSecret("carol", received())
		if n := metricValue(t, r.b, "ferry_sessions_resumed_subscriptions_denied_total", nil); n != 3 {
			t.Errorf("ferry_sessions_resumed_subscriptions_denied_total = %v, want 3", n)
		}
		r.waitRecord("carol", []string{mine}, 0)
	})
}

// TestResumeAliasedInflightUnderOwnACL: mochi keeps no topic name for a
// delivery it sent under an outbound Topic Alias (MQTT 5), and resends it
// as it is on a resume here. alice (MQTT 5, Topic Alias Maximum 4, session
// expiry 300 s) gets secret-0, secret-1, open-0, open-1, open-2 (each
// topic's later ones under its alias), acknowledges open-0 and open-2 only,
// and her connection drops. bob resumes on the same instance: neither
// secret one reaches him, named or not, and open-1, which his ACL allows,
// comes with its topic name (the replay resends it from Kafka); it is not
// lost although alice acknowledged a later message of its partition.
func TestResumeAliasedInflightUnderOwnACL(t *testing.T) {
	stateModes(t, func(t *testing.T, ca, cb Config) {
		r := newACLResume(t, ca, cb, false)
		alice, err := dialLightConnect(&net.Dialer{Timeout: 5 * time.Second}, r.a.MQTTAddr(), packets.Packet{
			FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 5,
			Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30, ClientIdentifier: r.id,
				UsernameFlag: true, Username: []byte("alice"), PasswordFlag: true, Password: []byte("a")},
			Properties: packets.Properties{SessionExpiryInterval: 300, SessionExpiryIntervalFlag: true, TopicAliasMaximum: 4},
		})
		if err != nil {
			t.Fatalf("alice: %v", err)
		}
		t.Cleanup(alice.close)
		alice.send(t, 5, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe}, PacketID: 1,
			Filters: packets.Subscriptions{{Filter: r.secretF, Qos: 1}, {Filter: r.openF, Qos: 1}}})
		if pk, _ := alice.next(t, 5, 10*time.Second); pk.FixedHeader.Type != packets.Suback || string(pk.ReasonCodes) != "\x01\x01" {
			t.Fatalf("alice's SUBACK: type %d reasons %#v, want [1 1]", pk.FixedHeader.Type, pk.ReasonCodes)
		}
		sent := []struct{ topic, payload string }{{r.secret, "secret-0"}, {r.secret, "secret-1"},
			{r.open, "open-0"}, {r.open, "open-1"}, {r.open, "open-2"}}
		for _, m := range sent {
			publishQoS1(t, r.pubA, m.topic, m.payload, false)
		}
		aliased := 0
		for range sent {
			pk, _ := alice.next(t, 5, 10*time.Second)
			if pk.FixedHeader.Type != packets.Publish {
				t.Fatalf("alice: packet type %d, want PUBLISH", pk.FixedHeader.Type)
			}
			if pk.TopicName == "" {
				aliased++
			}
			if p := string(pk.Payload); p == "open-0" || p == "open-2" {
				alice.send(t, 5, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: pk.PacketID})
			}
		}
		if aliased != 3 {
			t.Fatalf("alice got %d deliveries without a topic name (under an alias), want 3", aliased)
		}
		// Both acknowledgements are in before the position is read at the
		// disconnect: nothing of open is pending but open-1.
		waitFor(t, 10*time.Second, "open-0 and open-2 acknowledged", func() bool {
			cl, ok := r.a.server.Clients.Get(r.id)
			return ok && cl.State.Inflight.Len() == 3
		})
		alice.close()
		waitFor(t, 10*time.Second, "alice's session offline", func() bool {
			return sessionOffline(r.a, r.id)
		})
		_, received := r.resume("bob", "b")
		// The replay is over once the subscription is live, and everything it
		// and mochi's resend wrote comes before a live message.
		waitSubscribers(t, r.b, r.open, 1)
		publishQoS1(t, r.pubA, r.open, "open-live", false)
		waitFor(t, 15*time.Second, "the live open message at bob", func() bool { return slices.Contains(received(), r.open+" open-live") })
		r.noSecret("bob", received())
		if got := received(); !slices.Contains(got, r.open+" open-1") {
			t.Fatalf("bob never got open-1 (unacknowledged by alice, allowed to him); he got %q", got)
		}
	})
}
