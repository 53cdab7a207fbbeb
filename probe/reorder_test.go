package probe

import (
	"testing"

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
