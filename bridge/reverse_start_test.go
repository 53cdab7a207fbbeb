package bridge

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestReverseStartNoRaceWithFirstRecord: a partition without a commit
// (start_offset latest) that is empty when the group joins gets its first
// record appended right before the end offset is listed. kgo's own reset
// (list by time: nothing; then the end: 1) skipped that record; the bridge
// lists the end first and the time after it, so the record is delivered.
// kfake makes the race deterministic: it holds the first end-offset listing
// of the topic until a record has been produced.
func TestReverseStartNoRaceWithFirstRecord(t *testing.T) {
	fake, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	brokers := strings.Join(fake.ListenAddrs(), ",")
	k, m := revTopic(t, "race")
	prod := kgoProducer(t, brokers)
	if _, err := kadm.NewClient(prod).CreateTopic(context.Background(), 1, 1, nil, k); err != nil {
		t.Fatal(err)
	}

	var fired atomic.Bool
	firstIn := make(chan struct{}) // closed once "first" is in Kafka
	fake.ControlKey(int16(kmsg.ListOffsets), func(req kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		lr := req.(*kmsg.ListOffsetsRequest)
		for _, tp := range lr.Topics {
			for _, p := range tp.Partitions {
				if tp.Topic != k || p.Timestamp != -1 || !fired.CompareAndSwap(false, true) {
					continue
				}
				fake.DropControl()
				done := make(chan struct{})
				go func() {
					defer close(done)
					defer close(firstIn)
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					if err := prod.ProduceSync(ctx, &kgo.Record{Topic: k, Value: []byte("first")}).FirstErr(); err != nil {
						t.Errorf("produce during the listing: %v", err)
					}
				}()
				fake.SleepControl(func() { <-done })
				return nil, nil, false
			}
		}
		return nil, nil, false
	})

	cfg := testConfig(brokers)
	cfg.Reverse.Topics = []string{k}
	// The subscriber is there before the group joins.
	hold := make(chan struct{})
	cfg.reverseHold = hold
	b := startBridge(t, cfg)
	col := &collector{}
	subscribePaho(t, b.MQTTAddr(), "race-"+randHex(4), m, true, col)
	close(hold)
	waitFor(t, 20*time.Second, "the end offset listed with a record appended just before", fired.Load)
	// "second" goes after "first" is in Kafka: produced while the listing
	// was held, the two could land in either order (a fresh-clone run
	// delivered [second first] so, both in Kafka's order).
	select {
	case <-firstIn:
	case <-time.After(20 * time.Second):
		t.Fatal("the record produced during the listing did not land")
	}
	produceAll(t, prod, []*kgo.Record{{Topic: k, Value: []byte("second")}})
	waitFor(t, 20*time.Second, "the second record", func() bool { return slices.Contains(col.snapshot(), "second") })
	if got := col.snapshot(); !slices.Equal(got, []string{"first", "second"}) {
		t.Fatalf("delivered %q, want [first second]: a record appended while the start offset was listed was skipped", got)
	}
}
