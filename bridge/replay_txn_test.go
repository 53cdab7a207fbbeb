package bridge

import (
	"context"
	"slices"
	"testing"
	"time"

	pahov3 "github.com/eclipse/paho.mqtt.golang"

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

// TestAbortedTransactionNeverDelivered (issue 50 part 4): a transactional
// producer writes "a1", "a2" to a reverse topic and aborts, then "c1" and
// commits. With kafka.isolation_level read_committed (the default) a live
// subscriber and a persistent session resumed after the transactions (its
// replay) get "c1" and never the aborted records: one partition, delivered
// in offset order, so whatever arrived before "c1" is all that would come
// of the aborted ones. With read_uncommitted they arrive.
func TestAbortedTransactionNeverDelivered(t *testing.T) {
	for _, level := range []string{readCommitted, readUncommitted} {
		t.Run(level, func(t *testing.T) {
			brokers := kafkatest.Brokers(t)
			k, m := revTopic(t, "abort")
			kafkatest.CreateTopic(t, brokers, k, 1, nil)
			cfg := reverseConfig(brokers, k)
			cfg.Kafka.IsolationLevel = level
			b := startBridge(t, cfg)
			live := make(chan string, 100)
			sub := connectPaho(t, b.MQTTAddr(), "abort-live-"+randHex(3))
			if tok := sub.Subscribe(m, 1, func(_ pahov3.Client, msg pahov3.Message) { live <- string(msg.Payload()) }); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
				t.Fatalf("subscribe: %v", tok.Error())
			}
			id := "abort-" + randHex(3)
			replayed := make(chan string, 100)
			persistent := persistentInto(replayed)
			subscribeThenGoOffline(t, b, id, m, persistent)

			txn, err := kgo.NewClient(kgo.SeedBrokers(kafkatest.Addrs(brokers)...), kgo.TransactionalID("ferrytest-"+randHex(4)))
			if err != nil {
				t.Fatal(err)
			}
			defer txn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for _, tx := range []struct {
				vals []string
				end  kgo.TransactionEndTry
			}{{[]string{"a1", "a2"}, kgo.TryAbort}, {[]string{"c1"}, kgo.TryCommit}} {
				if err := txn.BeginTransaction(); err != nil {
					t.Fatal(err)
				}
				for _, v := range tx.vals {
					if err := txn.ProduceSync(ctx, &kgo.Record{Topic: k, Value: []byte(v)}).FirstErr(); err != nil {
						t.Fatal(err)
					}
				}
				if err := txn.EndTransaction(ctx, tx.end); err != nil {
					t.Fatal(err)
				}
			}
			wantAborted := level == readUncommitted
			if got := untilPayload(t, live, "c1"); slices.Contains(got, "a1") != wantAborted {
				t.Errorf("live subscriber, %s: got %v before the committed c1", level, got)
			}
			covers := time.Now().Add(-session.HorizonSlack).UnixMilli()
			waitFor(t, 20*time.Second, "the reverse path's horizon past the transactions", func() bool {
				return b.stateEngine.ReverseHorizon() >= covers
			})
			sub2 := connectPaho(t, b.MQTTAddr(), id, persistent)
			defer sub2.Disconnect(100)
			if got := untilPayload(t, replayed, "c1"); slices.Contains(got, "a1") != wantAborted {
				t.Errorf("replay of a resumed session, %s: got %v before the committed c1", level, got)
			}
		})
	}
}

// untilPayload returns what arrived on got up to and including want
// (within 20 s, else the test fails).
func untilPayload(t *testing.T, got <-chan string, want string) []string {
	t.Helper()
	var seen []string
	deadline := time.After(20 * time.Second)
	for {
		select {
		case p := <-got:
			seen = append(seen, p)
			if p == want {
				return seen
			}
		case <-deadline:
			t.Fatalf("no %s within 20 s (got %v)", want, seen)
		}
	}
}
