package bridge

import (
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestEdgesResumedSubscriptionsLiveAtConnack (issue 53 item 12): a 3.1.1
// session resumed with Session Present 1 gets a QoS 0 message published
// right after its CONNACK. "If the Server accepts a connection with
// CleanSession set to 0, the value set in Session Present depends on
// whether the Server already has stored Session state" [MQTT-3.2.2-2],
// and the Session state in the Server includes "The Client's
// subscriptions" (3.1.2.4): with Session Present 1 they exist from the
// CONNACK on; a publish after it matches them. The session resumes on a
// freshly started instance, whose replay of the session's queue from Kafka
// ran after the CONNACK, and the subscriptions went live only after it:
// the QoS 0 messages published meanwhile were never delivered (QoS 0 is
// not queued, so the replay does not bring them).
func TestEdgesResumedSubscriptionsLiveAtConnack(t *testing.T) {
	edgesResumedSubscriptionsLiveAtConnack(t, inProcessPair)
}

func edgesResumedSubscriptionsLiveAtConnack(t *testing.T, pair func(*testing.T) instancePair) {
	for _, subQoS := range []byte{0, 1} {
		t.Run(fmt.Sprintf("sub-qos%d", subQoS), func(t *testing.T) {
			ip := pair(t)
			aAddr := ip.startA()
			id, topic := "live-at-connack-"+randHex(4), "edges/live/"+randHex(4)
			sub := dialPersistent(t, aAddr, id, 4)
			subscribeRaw(t, sub, 4, topic, subQoS)
			sub.close()
			waitFor(t, 15*time.Second, "a records the session offline", func() bool { return ip.offline(id) })

			bAddr := ip.startB()
			pub, err := dialLight(&net.Dialer{Timeout: 5 * time.Second}, bAddr, "live-pub-"+randHex(3), 4, 30)
			if err != nil {
				t.Fatal(err)
			}
			defer pub.close()
			again := dialPersistent(t, bAddr, id, 4) // CONNACK read: Session Present 1
			for i := range 5 {
				_ = pub.appendPublish(4, topic, 0, 0, []byte("q0-"+strconv.Itoa(i)))
			}
			if err := pub.flush(); err != nil {
				t.Fatal(err)
			}
			got := again.nextOf(t, 4, packets.Publish, 10*time.Second)
			if string(got.Payload) != "q0-0" {
				t.Fatalf("first message after the resume: %q, want q0-0", got.Payload)
			}
		})
	}
}
