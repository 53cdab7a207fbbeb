package bridge

import (
	"context"
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

// Issue 22, item 7: a topic gains a partition while records of key K wait
// in partition 0 (their request failed, the retry is unanswered). K now
// hashes to partition 1: K's next record must not reach Kafka before the
// older ones, although partition 1 and the request carrying it are free.
func TestProducerTopicGrowthKeepsKeyOrder(t *testing.T) {
	fk := newFakeKafka()
	fk.addTopic("t", 1)
	fk.addTopic("other", 1)
	key := keysForPartitions(2)[1] // in partition 0 of 1, in partition 1 of 2
	var gated atomic.Bool
	var attempts atomic.Int32
	onWire1, onWire2 := make(chan struct{}), make(chan struct{})
	grown, release := make(chan struct{}), make(chan struct{})
	fk.reqFault = func(ctx context.Context, req *produceAPI.Request) error {
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
	for _, tp := range []string{"t", "other"} {
		if err, _ := h.send(tp, key, "warm", 1).wait(t, 15*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	gated.Store(true)
	var olds []outcome
	for _, v := range []string{"k1", "k2", "k3", "k4", "k5"} {
		olds = append(olds, h.send("t", key, v, 1))
	}
	waitClosed(t, onWire1, "first request for partition 0")
	fk.addPartitions("t", 1)
	close(grown)
	waitClosed(t, grewLog, "the producer to learn of the new partition")
	waitClosed(t, onWire2, "the retry of partition 0")
	k6 := h.send("t", key, "k6", 1)
	// "other" is led by the same broker: once its record is acknowledged,
	// a request carrying k6 would have been answered too.
	if err, _ := h.send("other", "x", "x1", 1).wait(t, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	if w := fk.writeOrder(); slices.Contains(w, "k6") {
		t.Fatalf("k6 (key moved to partition 1) written while k1..k5 still wait in partition 0: %q", w)
	}
	close(release)
	for i, o := range append(olds, k6) {
		if err, _ := o.wait(t, 15*time.Second); err != nil {
			t.Fatalf("record %d: %v", i+1, err)
		}
	}
	var ks []string
	for _, v := range fk.writeOrder() {
		if strings.HasPrefix(v, "k") {
			ks = append(ks, v)
		}
	}
	if want := []string{"k1", "k2", "k3", "k4", "k5", "k6"}; !slices.Equal(ks, want) {
		t.Fatalf("key's records written in the order %q, want %q", ks, want)
	}
	if got := values(fk.log("t", 1)); !slices.Equal(got, []string{"k6"}) {
		t.Fatalf("partition 1 has %q, want [k6]", got)
	}
	if _, _, v := fk.stats(); v != "" {
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
