package producer

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	produceAPI "github.com/segmentio/kafka-go/protocol/produce"

	"github.com/ferry-bridge/ferry/internal/fakekafka"
)

// signalHandler closes ch at the first log record whose message starts
// with prefix.
type signalHandler struct {
	slog.Handler
	prefix string
	once   *sync.Once
	ch     chan struct{}
}

func (h signalHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h signalHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.prefix) {
		h.once.Do(func() { close(h.ch) })
	}
	return nil
}

// carries reports whether req carries partition part of topic.
func carries(req *produceAPI.Request, topic string, part int32) bool {
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			if rt.Topic == topic && rp.Partition == part {
				return true
			}
		}
	}
	return false
}

// keyMoving returns a key in partition from of n partitions and in
// partition to of m.
func keyMoving(t *testing.T, from, n, to, m int) string {
	t.Helper()
	for i := range 10000 {
		k := fmt.Sprintf("key%d", i)
		if partitionFor([]byte(k), n) == from && partitionFor([]byte(k), m) == to {
			return k
		}
	}
	t.Fatalf("no key in partition %d of %d and %d of %d", from, n, to, m)
	return ""
}

// Issue 22, item 7: a topic gains a partition (2 -> 3) while records of key
// K wait in partition 0 (their request failed, the retry is unanswered). K
// now hashes to partition 2: K's next record must not reach Kafka before
// the older ones, although partition 2 and the request carrying it are
// free. Key B stays in partition 1: it is not held.
func TestProducerTopicGrowthKeepsKeyOrder(t *testing.T) {
	fk := fakekafka.New()
	fk.AddTopic("t", 1, 1)
	key := keyMoving(t, 0, 2, 2, 3)
	stay := keyMoving(t, 1, 2, 1, 3)
	var gated atomic.Bool
	var attempts atomic.Int32
	onWire1, onWire2 := make(chan struct{}), make(chan struct{})
	grown, release := make(chan struct{}), make(chan struct{})
	fk.ReqFault = func(ctx context.Context, req *produceAPI.Request) error {
		if !gated.Load() || !carries(req, "t", 0) {
			return nil
		}
		switch attempts.Add(1) {
		case 1: // fails on the connection once the topic has grown: metadata is read again
			close(onWire1)
			<-grown
			return &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
		case 2: // the retry hangs until released
			close(onWire2)
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	h := newProdHarness(t, fk, 256, nil)
	grewLog := make(chan struct{})
	h.p.log = slog.New(signalHandler{prefix: "kafka topic gained partitions", once: new(sync.Once), ch: grewLog})
	h.start()
	for _, k := range []string{key, stay} {
		if err, _ := h.send("t", k, "warm", 1).wait(t, 15*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	gated.Store(true)
	var olds []outcome
	for _, v := range []string{"k1", "k2", "k3", "k4", "k5"} {
		olds = append(olds, h.send("t", key, v, 1))
	}
	waitClosed(t, onWire1, "first request for partition 0")
	fk.AddPartitions("t", 1)
	close(grown)
	waitClosed(t, grewLog, "the producer to learn of the new partition")
	waitClosed(t, onWire2, "the retry of partition 0")
	k6 := h.send("t", key, "k6", 1)
	// B's partition is led by the same broker: once B's record is
	// acknowledged, a request carrying k6 would have been answered too.
	if err, _ := h.send("t", stay, "b1", 1).wait(t, 15*time.Second); err != nil {
		t.Fatalf("b1, a key that did not move: %v", err)
	}
	if w := fk.WriteOrder(); slices.Contains(w, "k6") {
		t.Fatalf("k6 (key moved to partition 2) written while k1..k5 still wait in partition 0: %q", w)
	}
	close(release)
	for i, o := range append(olds, k6) {
		if err, _ := o.wait(t, 15*time.Second); err != nil {
			t.Fatalf("record %d: %v", i+1, err)
		}
	}
	var ks []string
	for _, v := range fk.WriteOrder() {
		if strings.HasPrefix(v, "k") {
			ks = append(ks, v)
		}
	}
	if want := []string{"k1", "k2", "k3", "k4", "k5", "k6"}; !slices.Equal(ks, want) {
		t.Fatalf("key's records written in the order %q, want %q", ks, want)
	}
	if got := fakekafka.Values(fk.Log("t", 2)); !slices.Equal(got, []string{"k6"}) {
		t.Fatalf("partition 2 has %q, want [k6]", got)
	}
	if _, _, v := fk.Stats(); v != "" {
		t.Fatal(v)
	}
}

func waitClosed(t *testing.T, ch chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(15 * time.Second):
		t.Fatalf("timed out after 15s waiting for %s", what)
	}
}

// Issue 22, item 7, two growths in a row (2 -> 3 -> 4 partitions) before
// the first settled: key A is in partition 0 of 2, 2 of 3 and 0 of 4. A2,
// held back by the first growth, must not be overtaken by A3, which the
// second growth sends back to A's first partition. Drives the producer's
// loop state directly (the loop does not run).
func TestProducerTopicGrowsTwiceKeepsKeyOrder(t *testing.T) {
	var key string
	for i := 0; key == "" && i < 100000; i++ {
		k := fmt.Sprintf("key%d", i)
		if b := []byte(k); partitionFor(b, 2) == 0 && partitionFor(b, 3) == 2 && partitionFor(b, 4) == 0 {
			key = k
		}
	}
	if key == "" {
		t.Fatal("no key in partitions 0, 2, 0 of 2, 3, 4")
	}
	h := newProdHarness(t, fakekafka.New(), 16, nil)
	p := h.p
	now := time.Now()
	tq := &topicQ{name: "t", lastUsed: now}
	p.tqs["t"] = tq
	p.setLeaders(tq, []int32{1, 1}, now)
	place := func(v string) {
		r, _ := h.rec("t", key, v, 1, time.Minute)
		if !p.place(r, time.Now()) {
			t.Fatalf("%s not placed", v)
		}
	}
	place("a1")
	p.setLeaders(tq, []int32{1, 1, 1}, now)
	place("a2")
	p.setLeaders(tq, []int32{1, 1, 1, 1}, now)
	place("a3")
	var got []string
	for _, r := range tq.parts[0].q {
		got = append(got, string(r.Value))
	}
	if tq.grow != nil {
		for _, r := range tq.grow.hold {
			got = append(got, "held:"+string(r.Value))
		}
	}
	if want := []string{"a1", "a2", "a3"}; !slices.Equal(got, want) {
		t.Fatalf("partition 0 and the held records: %q, want %q", got, want)
	}
}
