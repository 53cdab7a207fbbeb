package probe

import (
	"strings"
	"testing"
	"time"

	"github.com/ferry-bridge/ferry/probe/stamp"
)

// holdPublisher holds every message of publisher p (of n: seq % n == p)
// until k of them are held, then emits them in their order: publisher p's
// order is kept, but its messages arrive after later messages of the
// others, as independent publishers do on any broker.
func holdPublisher(n, p uint32, k int) transform {
	var held [][]byte
	return func(b []byte, emit func([]byte)) {
		st, err := stamp.Parse(b)
		if err != nil || st.Seq%n != p {
			emit(b)
			return
		}
		held = append(held, b)
		if len(held) == k {
			for _, h := range held {
				emit(h)
			}
			held = held[:0]
		}
	}
}

// swapSeqs emits a after b (two messages of the same publisher when b - a
// is a multiple of the publisher count): one reordering.
func swapSeqs(a, b uint32) transform {
	var held []byte
	return func(p []byte, emit func([]byte)) {
		st, err := stamp.Parse(p)
		switch {
		case err != nil:
			emit(p)
		case st.Seq == a:
			held = p
		case st.Seq == b:
			emit(p)
			emit(held)
		default:
			emit(p)
		}
	}
}

// TestReorderedPerPublisher: several publishers whose messages interleave
// but each stay in order report 0 reordered; one swap inside one
// publisher's stream reports exactly 1.
func TestReorderedPerPublisher(t *testing.T) {
	const clients = 4
	for _, tc := range []struct {
		name string
		tf   transform
		want int64
	}{
		// 300 measured + 20 warm-up messages, 80 per publisher: publisher 1's
		// arrive in bursts of 10, after up to 30 later messages of others.
		{"interleaved publishers", holdPublisher(clients, 1, 10), 0},
		{"swap inside one publisher", swapSeqs(100, 100+clients), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startBroker(t)
			brokers := startKfake(t, "_reorder")
			forwardMQTTToKafka(t, b, brokers, "/reorder", "_reorder", 0, tc.tf)
			cfg := testConfig(MQTTToKafka, b, brokers)
			cfg.Topic, cfg.Clients = "/reorder", clients
			res, err := run(t, MQTTToKafka, cfg)
			if err != nil {
				t.Fatal(err)
			}
			c := row(t, res, MetricE2E).Counts
			if c.Received != 300 || c.Lost() != 0 || c.Reordered != tc.want {
				t.Fatalf("counts %+v, want %d reordered", c, tc.want)
			}
		})
	}
}

// TestPathCheckWaitsForTheBridge: a hop that delivers nothing during its
// first second (a bridge that has not discovered the new topic yet) costs
// no measured message: the run starts once a marker record got through.
func TestPathCheckWaitsForTheBridge(t *testing.T) {
	b := startBroker(t)
	brokers := startKfake(t, "_late_hop")
	var start time.Time
	late := func(p []byte, emit func([]byte)) {
		if start.IsZero() {
			start = time.Now()
		}
		if time.Since(start) > time.Second {
			emit(p)
		}
	}
	forwardKafkaToMQTT(t, b, brokers, "_late_hop", "/late/hop", 1, 0, late)
	cfg := testConfig(KafkaToMQTT, b, brokers)
	cfg.Topic, cfg.KafkaTopic, cfg.Rate = "/late/hop", "_late_hop", 1000
	res, err := run(t, KafkaToMQTT, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c := row(t, res, MetricE2E).Counts; c.Lost() != 0 || c.WarmupLost() != 0 || res.Foreign != 0 {
		t.Fatalf("counts %+v, foreign %d", c, res.Foreign)
	}
	if !strings.Contains(strings.Join(res.Checks, "\n"), "path check") {
		t.Fatalf("no path check line: %v", res.Checks)
	}
}
