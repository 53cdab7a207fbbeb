package bridge

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

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

// TestCheckpointsGoOutTogether: the positions of many sessions that moved
// in the same second are written together, not one acknowledged write
// after the other. 200 persistent sessions each acknowledge one delivery;
// every produce request for the sessions topic takes 20 ms (kfake); the
// checkpoint round must write every position with far fewer requests
// than sessions (one after the other, they took 200 requests and 4 s).
func TestCheckpointsGoOutTogether(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cfg := testConfig(strings.Join(c.ListenAddrs(), ","))
	cfg.State.SessionsTopic, cfg.State.RetainedTopic = "_ferry_sessions_cp"+randHex(3), "_ferry_retained_cp"+randHex(3)
	b := startBridge(t, cfg)
	const n = 200
	run := randHex(3)
	topic := "cp/" + run
	ktopic, err := topicmap.EncodeTopic(topic)
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]*lightClient, n)
	t.Cleanup(func() {
		for _, cl := range conns {
			if cl != nil {
				cl.close()
			}
		}
	})
	dialEach(t, 16, 0, n, "sessions failed", func(d *net.Dialer, i int) error {
		cl, err := dialLightConnect(d, b.MQTTAddr(), stormConnect(fmt.Sprintf("cp%s-%d", run, i)))
		if err == nil {
			conns[i] = cl
			err = cl.subscribe(4, topic, 1)
		}
		return err
	})
	// Produce v13 names a topic by its id.
	adm, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	tds, err := kadm.NewClient(adm).ListTopics(context.Background(), cfg.State.SessionsTopic)
	if err != nil || tds.Error() != nil {
		t.Fatalf("sessions topic: %v %v", err, tds.Error())
	}
	sessionsID := tds[cfg.State.SessionsTopic].ID
	var writes atomic.Int64
	c.ControlKey(kmsg.Produce.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, rt := range req.(*kmsg.ProduceRequest).Topics {
			if rt.Topic == cfg.State.SessionsTopic || rt.TopicID == sessionsID {
				writes.Add(1)
				time.Sleep(20 * time.Millisecond)
			}
		}
		return nil, nil, false
	})
	pub := connectPaho(t, b.MQTTAddr(), "pub-"+run)
	publishN(t, pub, topic, 0, 1)
	dialEach(t, 16, 0, n, "deliveries failed", func(_ *net.Dialer, i int) error {
		cl := conns[i]
		_ = cl.conn.SetDeadline(time.Now().Add(20 * time.Second))
		for {
			typ, body, err := cl.read()
			if err != nil {
				return err
			}
			if typ>>4 == packets.Publish {
				tl := int(body[0])<<8 | int(body[1])
				pid := body[2+tl : 4+tl]
				cl.out.Write([]byte{packets.Puback << 4, 2, pid[0], pid[1]})
				return cl.flush()
			}
		}
	})
	before := writes.Load()
	waitFor(t, 30*time.Second, "every session's position written", func() bool {
		for i := range n {
			if !positionAt(b.stateEngine.Lookup(fmt.Sprintf("cp%s-%d", run, i)), ktopic, 1) {
				return false
			}
		}
		return true
	})
	if got := writes.Load() - before; got > n/4 {
		t.Fatalf("%d sessions' checkpoints took %d produce requests: written one after the other", n, got)
	} else {
		t.Logf("%d sessions' checkpoints: %d produce requests", n, got)
	}
}
