package producer

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	produceAPI "github.com/segmentio/kafka-go/protocol/produce"

	"github.com/ferry-bridge/ferry/internal/fakekafka"
	"github.com/ferry-bridge/ferry/internal/testhelp"
)

// Issue 22, item 5: one broker hangs (its produce requests are never
// answered, no error until the ack timeout). Its partition's queue fills;
// the records beyond its cap must not stop the loop from reading the ring:
// a record for a partition of another broker is acknowledged while the
// hung request is still unanswered. QoS 1 records beyond the cap queue
// (bounded by heldCap) and fail at their deadline, not before; QoS 0 ones
// wait for room until the request counts as hung (hangAfter), then are
// dropped.
func TestProducerHungBrokerDoesNotStallOthers(t *testing.T) {
	for _, qos := range []int{1, 0} {
		t.Run(fmt.Sprintf("qos%d", qos), func(t *testing.T) { testHungBroker(t, qos) })
	}
}

func testHungBroker(t *testing.T, qos int) {
	fk := fakekafka.New()
	fk.AddTopic("hung", 1)
	fk.AddTopic("good", 2)
	var hungReturned atomic.Bool
	fk.ReqFault = func(ctx context.Context, req *produceAPI.Request) error {
		if req.Topics[0].Topic != "hung" {
			return nil
		}
		<-ctx.Done() // a hung broker: no answer until the request's deadline
		hungReturned.Store(true)
		return ctx.Err()
	}
	const ackTimeout = 3 * time.Second
	h := newProdHarness(t, fk, 1024, func(c *Config) { c.MaxBatch = 4; c.AckTimeout = ackTimeout })
	h.start()
	if err, _ := h.send("good", "k", "warm", 1).wait(t, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	partCap := h.p.partCap
	start := time.Now()
	var hung []outcome
	// Three times the hung partition's cap (below heldCap): the records
	// beyond it are taken from the ring at once (QoS 1) or once the
	// partition counts as hung (QoS 0).
	for i := range 3 * partCap {
		hung = append(hung, h.send("hung", "k", fmt.Sprint(i), qos))
	}
	good := h.send("good", "k", "while-hung", 1)
	err, _ := good.wait(t, 3*ackTimeout)
	if err != nil {
		t.Fatalf("record for the healthy broker: %v", err)
	}
	if hungReturned.Load() {
		t.Fatalf("the healthy broker's record was acknowledged only after the hung request gave up (%s after the hang began): the hung partition held up the loop",
			time.Since(start).Round(time.Millisecond))
	}
	if qos == 0 {
		testhelp.WaitFor(t, 15*time.Second, "QoS 0 records beyond the hung partition's cap dropped", func() bool {
			return metricValue(h.m.Dropped) > 0
		})
		return
	}
	for i, o := range hung {
		err, at := o.wait(t, 3*ackTimeout)
		if !errors.Is(err, ErrKafkaUnavailable) {
			t.Fatalf("hung record %d: err = %v, want ErrKafkaUnavailable", i, err)
		}
		// The first record fails at its deadline (its receipt + the ack
		// timeout), the later ones of its key with it (key order): none
		// before.
		if took := at.Sub(start); took < ackTimeout {
			t.Fatalf("hung record %d failed after %s, before the ack timeout %s", i, took, ackTimeout)
		}
	}
	if _, _, v := fk.Stats(); v != "" {
		t.Fatal(v)
	}
}

// While a broker hangs, the producer holds at most heldCap records (the
// memory bound the README states), counted per record: a batch taken from
// the ring when it held heldCap-1 must not carry it past the bound.
func TestProducerHeldCapPerRecord(t *testing.T) {
	fk := fakekafka.New()
	// Eight partitions on the hung broker: their queues (8 x partCap) have
	// room beyond heldCap, so only the held count can stop the loop.
	fk.AddTopic("hung", 1, 1, 1, 1, 1, 1, 1, 1)
	fk.AddTopic("good", 2)
	fk.ReqFault = func(ctx context.Context, req *produceAPI.Request) error {
		if req.Topics[0].Topic != "hung" {
			return nil
		}
		<-ctx.Done()
		return ctx.Err()
	}
	h := newProdHarness(t, fk, 1024, func(c *Config) { c.MaxBatch = 4; c.AckTimeout = 30 * time.Second })
	// One record for the healthy broker in the first batch: once it is
	// acknowledged the count is off the batch size's multiples.
	h.send("good", "k", "first", 1)
	keys := keysForPartitions(8)
	for i := range h.p.heldCap + 4*h.cfg.MaxBatch {
		h.send("hung", keys[i%len(keys)], fmt.Sprint(i), 1)
	}
	h.start()
	heldCap := float64(h.p.heldCap)
	var held float64
	testhelp.WaitFor(t, 15*time.Second, "the producer to reach its bound", func() bool {
		held = metricValue(h.m.Held)
		return held >= heldCap
	})
	if held > heldCap {
		t.Fatalf("the producer holds %.0f records, bound %.0f", held, heldCap)
	}
}
