package bridge

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
	"github.com/ferry-bridge/ferry/session"
)

// TestReplayReadsTransactionalTopic: a reverse topic written by a
// transactional producer (Kafka Streams, exactly-once applications) ends
// with a commit marker, a control record consumers do not see. A resume's
// replay reads each partition up to its end offset, and waited for a
// record at the offset before it: the marker never came, the replay never
// ended, its subscriptions never went live and it held its slot for good.
// The records must come, and so must one published after the resume.
func TestReplayReadsTransactionalTopic(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	k, m := revTopic(t, "txn")
	kafkatest.CreateTopic(t, brokers, k, 1, nil)
	cfg := reverseConfig(brokers, k)
	b := startBridge(t, cfg)
	id := "txn-" + randHex(3)
	got := make(chan string, 100)
	persistent := persistentInto(got)
	subscribeThenGoOffline(t, b, id, m, persistent)

	txn, err := kgo.NewClient(kgo.SeedBrokers(kafkatest.Addrs(brokers)...), kgo.TransactionalID("ferrytest-"+randHex(4)))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"t1", "t2", "t3"} {
		if err := txn.ProduceSync(ctx, &kgo.Record{Topic: k, Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	// The partition ends with the commit marker: handed out, it is at its
	// end, and the reverse path's horizon moves past the transaction.
	covers := time.Now().Add(-session.HorizonSlack).UnixMilli()
	waitFor(t, 20*time.Second, "the reverse path's horizon past the transaction", func() bool {
		return b.stateEngine.ReverseHorizon() >= covers
	})

	sub2 := connectPaho(t, b.MQTTAddr(), id, persistent)
	defer sub2.Disconnect(100)
	waitAll(t, got, "committed in a transaction while the session was away", "t1", "t2", "t3")
	// The replay has ended and the subscription is live: a later record
	// arrives (produced after the resume, past the replay's end offsets).
	produceAll(t, kgoProducer(t, brokers), []*kgo.Record{{Topic: k, Value: []byte("after")}})
	waitAll(t, got, "produced after the resume (the replay must have ended)", "after")
}

// waitAll waits up to 20 s until every one of want arrived in got (in any
// order, duplicates allowed).
func waitAll(t *testing.T, got <-chan string, why string, want ...string) {
	t.Helper()
	missing := map[string]bool{}
	for _, w := range want {
		missing[w] = true
	}
	deadline := time.After(20 * time.Second)
	for len(missing) > 0 {
		select {
		case p := <-got:
			delete(missing, p)
		case <-deadline:
			t.Fatalf("missing after 20 s: %v (%s)", missing, why)
		}
	}
}
