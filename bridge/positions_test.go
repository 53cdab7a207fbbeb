package bridge

import (
	"testing"
	"time"

	"github.com/ferry-bridge/ferry/state"
	"github.com/ferry-bridge/ferry/topicmap"
)

// TestSessionPositionsFollowAcks: a persistent session's record follows its
// client's acknowledgements. After the client acknowledged 10 QoS 1
// deliveries, the checkpoint (every second while positions move) writes a
// position one past the last of them and nothing pending. mochi reports an
// acknowledged delivery to OnQosComplete with the client's PUBACK, not with
// the PUBLISH; when the hook ignored every packet but a PUBLISH, deliveries
// stayed pending forever, the position never moved, the record grew with
// every delivery, and a resume after a crash redelivered everything since
// the subscription (TestSessionsSoakKill9 counted each as a duplicate).
func TestSessionPositionsFollowAcks(t *testing.T) {
	stateModes(t, func(t *testing.T, ca, _ Config) {
		a := startBridge(t, ca)
		id, topic := "dev-"+randHex(4), "pos/"+randHex(4)
		ktopic, err := topicmap.EncodeTopic(topic)
		if err != nil {
			t.Fatal(err)
		}
		col := &collector{}
		subscribePaho(t, a.MQTTAddr(), id, topic, false, col)
		pub := connectPaho(t, a.MQTTAddr(), "pub-"+randHex(4))
		publishN(t, pub, topic, 0, 10)
		waitFor(t, 10*time.Second, "10 deliveries", func() bool { return col.len() >= 10 })
		deadline := time.Now().Add(15 * time.Second)
		for {
			rec := sessionIn(t, readTable(t, ca.Kafka.Brokers, ca.State.SessionsTopic), id)
			if positionAt(rec, ktopic, 10) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("15 s after 10 acknowledged deliveries the session record has positions %+v and pending %+v; "+
					"want %s offset 10, delivered 10, nothing pending", positionsOf(rec), pendingOf(rec), ktopic)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
}

func positionAt(rec *state.Session, ktopic string, off int64) bool {
	if rec == nil || len(rec.Pending) > 0 {
		return false
	}
	for _, p := range rec.Positions {
		if p.Topic == ktopic && p.Partition == 0 && p.Offset == off && p.Delivered == off {
			return true
		}
	}
	return false
}

func positionsOf(rec *state.Session) []state.Position {
	if rec == nil {
		return nil
	}
	return rec.Positions
}

func pendingOf(rec *state.Session) []state.Pending {
	if rec == nil {
		return nil
	}
	return rec.Pending
}
