package producer

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/ferry-bridge/ferry/internal/fakekafka"
	"github.com/ferry-bridge/ferry/internal/testhelp"
)

// poisonFault refuses every batch that carries a record whose value starts
// with one of the prefixes, with that prefix's error code: Kafka refuses
// the whole batch for one bad record.
func poisonFault(codes map[string]kafka.Error) func(string, int32, []fakekafka.Rec) int16 {
	return func(_ string, _ int32, recs []fakekafka.Rec) int16 {
		for _, r := range recs {
			for prefix, code := range codes {
				if strings.HasPrefix(r.Value, prefix) {
					return int16(code)
				}
			}
		}
		return 0
	}
}

// Issue 22, item 6: Kafka refuses a batch with INVALID_RECORD for one
// record in it. Only that record fails (ErrKafkaRejected, counted); the
// others of the batch, of its key and of others, reach Kafka in order.
func TestProducerInvalidRecordFailsAlone(t *testing.T) {
	fk := fakekafka.New()
	fk.AddTopic("t", 1)
	fk.PartFault = poisonFault(map[string]kafka.Error{"bad": kafka.InvalidRecord})
	h := newProdHarness(t, fk, 64, nil)
	var outs []outcome
	var want []string
	// Queued before the producer runs: one batch carries them all.
	for i := range 12 {
		v := fmt.Sprintf("good-%d", i)
		if i == 5 {
			v = "bad-5"
		} else {
			want = append(want, v)
		}
		r, o := h.rec("t", fmt.Sprintf("k%d", i%3), v, 1, 10*time.Second)
		h.push(r)
		outs = append(outs, o)
	}
	h.start()
	for i, o := range outs {
		err, _ := o.wait(t, 15*time.Second)
		if i == 5 {
			if !errors.Is(err, ErrKafkaRejected) {
				t.Fatalf("invalid record: err = %v, want ErrKafkaRejected", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("innocent record %d refused with the invalid one: %v", i, err)
		}
	}
	if got := fakekafka.Values(fk.Log("t", 0)); !slices.Equal(got, want) {
		t.Fatalf("Kafka has %q, want %q", got, want)
	}
	if n := metricValue(h.m.ProduceErrors); n != 1 {
		t.Fatalf("produce errors counted: %v, want 1", n)
	}
}

// Issue 22, item 6: a QoS 0 record Kafka refuses as CORRUPT_MESSAGE
// (kafka-go calls it temporary) is given up at once and counted, not
// retried for the bridge's life; the QoS 0 records around it are written.
func TestProducerCorruptQoS0GivenUp(t *testing.T) {
	fk := fakekafka.New()
	fk.AddTopic("t", 1)
	fk.PartFault = poisonFault(map[string]kafka.Error{"corrupt": kafka.InvalidMessage})
	h := newProdHarness(t, fk, 64, nil)
	for _, v := range []string{"a", "corrupt", "b"} {
		h.send("t", "k", v, 0)
	}
	h.start()
	testhelp.WaitFor(t, 15*time.Second, "the corrupt record given up, the others written", func() bool {
		return metricValue(h.m.ProduceErrors) == 1 && len(fk.Log("t", 0)) == 2
	})
	if got := fakekafka.Values(fk.Log("t", 0)); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Kafka has %q, want [a b]", got)
	}
	testhelp.WaitFor(t, 15*time.Second, "nothing held", func() bool {
		return metricValue(h.m.Held) == 0
	})
}

// A batch of 512 records refused for one bad record is split in halves,
// not sent one record per request: the innocent records reach Kafka in
// order within about 2 x log2(512) extra round trips (one per record took
// 512, seconds under load, and records queued behind them missed their
// deadline).
func TestProducerRefusedBatchSplitsInHalves(t *testing.T) {
	fk := fakekafka.New()
	fk.AddTopic("t", 1)
	fk.PartFault = poisonFault(map[string]kafka.Error{"bad": kafka.MessageSizeTooLarge})
	h := newProdHarness(t, fk, 1024, nil)
	var outs []outcome
	var want []string
	for i := range 512 {
		v := fmt.Sprintf("good-%d", i)
		if i == 300 {
			v = "bad-300"
		} else {
			want = append(want, v)
		}
		r, o := h.rec("t", "k", v, 1, 30*time.Second)
		h.push(r)
		outs = append(outs, o)
	}
	h.start()
	for i, o := range outs {
		err, _ := o.wait(t, 30*time.Second)
		switch {
		case i == 300 && !errors.Is(err, ErrTooLarge):
			t.Fatalf("bad record: err = %v, want ErrTooLarge", err)
		case i < 300 && err != nil:
			t.Fatalf("record %d, before the bad one: %v", i, err)
		}
	}
	got := fakekafka.Values(fk.Log("t", 0))
	if !slices.Equal(got, want[:len(got)]) || len(got) < 300 {
		t.Fatalf("Kafka has %d records, not the first %d good ones in order", len(got), 300)
	}
	if _, reqs, _ := fk.Stats(); len(reqs) > 40 {
		t.Fatalf("%d produce requests for 512 records with one bad: the batch was not split in halves", len(reqs))
	}
}
