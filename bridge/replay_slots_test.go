package bridge

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
)

// TestStuckReplaysDoNotStopResumes (issue 31, bug 6): persistent sessions
// whose clients never acknowledge (Receive Maximum 1, nothing read, no
// PUBACK) resume on an instance, one more of them than it has replay
// slots; then a session with one queued message resumes there: it gets
// the message (within 30 s). A replay held its slot until its client had
// acknowledged, so the stuck ones took every slot for good and the last
// resume never started. Once the stuck clients acknowledge, each gets
// its whole queue, in order: a replay that gave its slot up goes on where
// it stopped.
func TestStuckReplaysDoNotStopResumes(t *testing.T) {
	const slots, queued = 2, 4
	stuckN := slots + 1
	b := startBridge(t, testConfig(kafkatest.Brokers(t)), func(b *Bridge) { b.replaySlots = slots })
	session := packets.Properties{SessionExpiryInterval: 300, SessionExpiryIntervalFlag: true}
	resumeProps := session
	resumeProps.ReceiveMaximum = 1
	subscribe := func(id, filter string) {
		c := dialLight5(t, b.MQTTAddr(), id, true, session)
		c.send(t, 5, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe}, PacketID: 1,
			Filters: packets.Subscriptions{{Filter: filter, Qos: 1}}})
		if pk, _ := c.next(t, 5, 10*time.Second); pk.FixedHeader.Type != packets.Suback {
			t.Fatalf("%s: want SUBACK, got type %d", id, pk.FixedHeader.Type)
		}
		c.close()
		waitFor(t, 10*time.Second, id+" offline", func() bool {
			return sessionOffline(b, id)
		})
	}
	tag := randHex(4)
	stuckTopic, normalTopic := "stuck/"+tag, "normal/"+tag
	var stuckIDs []string
	for i := range stuckN {
		id := fmt.Sprintf("stuck%d-%s", i, tag)
		stuckIDs = append(stuckIDs, id)
		subscribe(id, stuckTopic)
	}
	normalID := "normal-" + tag
	subscribe(normalID, normalTopic)

	pub := connectV5(t, b.MQTTAddr(), "pub-"+tag)
	var want []string
	for i := range queued {
		want = append(want, fmt.Sprint(i))
		mustPublish(t, pub, &paho.Publish{Topic: stuckTopic, QoS: 1, Payload: []byte(want[i])})
	}
	mustPublish(t, pub, &paho.Publish{Topic: normalTopic, QoS: 1, Payload: []byte("hello")})

	// The stuck clients resume and read nothing: each replay writes one
	// message and waits for its PUBACK. Once `slots` of them wait so, every
	// slot is taken by a client that does not acknowledge.
	stuck := make([]*lightClient, stuckN)
	for i, id := range stuckIDs {
		stuck[i] = dialLight5(t, b.MQTTAddr(), id, false, resumeProps)
	}
	waitFor(t, 20*time.Second, fmt.Sprintf("%d stuck sessions with a replayed message in flight", slots), func() bool {
		n := 0
		for _, id := range stuckIDs {
			if cl, ok := b.server.Clients.Get(id); ok && !cl.Closed() && cl.State.Inflight.Len() > 0 {
				n++
			}
		}
		return n >= slots
	})

	normal := dialLight5(t, b.MQTTAddr(), normalID, false, session)
	began := time.Now()
	// A slot comes free within replaySlotPatience (1 s) and the replay then
	// reads Kafka: seconds; 30 s because a loaded machine under -race owes
	// no latency, and the bug this guards against was "never".
	pk, _, err := normal.tryNext(5, 30*time.Second)
	if err != nil || pk.FixedHeader.Type != packets.Publish || string(pk.Payload) != "hello" {
		t.Fatalf("the resumed session's one queued message, with %d sessions that never acknowledge resumed first (%d replay slots): got type %d payload %q err %v after %s, want the PUBLISH \"hello\" within 30s",
			stuckN, slots, pk.FixedHeader.Type, pk.Payload, err, time.Since(began).Round(time.Millisecond))
	}
	t.Logf("the normal session's message came %s after it resumed", time.Since(began).Round(time.Millisecond))

	// Now the stuck clients acknowledge: each gets its whole queue, in order.
	for i, c := range stuck {
		var got []string
		deadline := time.Now().Add(30 * time.Second)
		for len(got) < queued {
			pk, _, err := c.tryNext(5, time.Until(deadline))
			if err != nil {
				t.Fatalf("%s, acknowledging: got %v of its queue %v: %v", stuckIDs[i], got, want, err)
			}
			if pk.FixedHeader.Type != packets.Publish {
				continue
			}
			got = append(got, string(pk.Payload))
			c.send(t, 5, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: pk.PacketID})
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s got %v, want its queue %v in order", stuckIDs[i], got, want)
		}
	}
}
