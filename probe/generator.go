package probe

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ferry-bridge/ferry/probe/stamp"
)

// sender sends one client's messages. send is called with a fresh payload
// whose stamp is already written; in closed loop it must return only when
// the message is acknowledged. flush waits for outstanding sends (open loop)
// and returns the first send error.
type sender interface {
	send(ctx context.Context, seq uint32, payload []byte) error
	flush(ctx context.Context) error
}

// stampSender is a sender that encodes messages itself (the raw MQTT
// engine): the generator hands it the stamp and the actual send time and
// builds no payload.
type stampSender interface {
	sendStamp(ctx context.Context, st stamp.Stamp, nowNs int64) error
}

// idler is a sender that buffers: idle is called before the generator
// waits for the next due time (open loop), so buffered messages leave.
type idler interface {
	idle() error
}

// generator drives the senders: client c sends sequences c, c+N, c+2N...
// Open loop (rate > 0): message i is due at t0 + i/rate and is stamped with
// that intended time, so a generator or system that falls behind shows up
// as latency (coordinated-omission correction). Closed loop: each send is
// stamped with the time it is made and waits for the previous one.
type generator struct {
	clk      clock
	total    uint32
	warmup   uint32
	rate     float64
	template []byte

	// sentAt[seq] is the actual send time (Unix ns); written by the owning
	// client goroutine, read after run returns.
	sentAt   []int64
	intended []int64
	sent     atomic.Int64
	t0       int64
	lastNs   []int64 // per client: when its last send returned
	maxLagNs []int64 // per client
}

func newGenerator(clk clock, warmup, count uint32, rate float64, template []byte) *generator {
	total := warmup + count
	return &generator{
		clk: clk, total: total, warmup: warmup, rate: rate, template: template,
		sentAt:   make([]int64, total),
		intended: make([]int64, total),
	}
}

// run sends every message through senders (one per client) and returns
// when all sends are done and flushed, or at the first error.
func (g *generator) run(ctx context.Context, senders []sender) error {
	n := len(senders)
	g.maxLagNs = make([]int64, n)
	g.lastNs = make([]int64, n)
	// Align the clients on a common start a little in the future.
	g.t0 = g.clk.now() + 2e6
	errs := make([]error, n)
	var wg sync.WaitGroup
	for c := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[c] = g.client(ctx, c, n, senders[c])
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (g *generator) client(ctx context.Context, c, n int, s sender) error {
	ss, _ := s.(stampSender)
	idl, _ := s.(idler)
	// sent is added to the shared counter every 256 messages (the
	// progress line) and at the end: one shared atomic per message would
	// bounce a cache line between the clients.
	var sent int64
	defer func() { g.sent.Add(sent) }()
	for seq := uint32(c); seq < g.total; seq += uint32(n) {
		if sent == 256 {
			g.sent.Add(sent)
			sent = 0
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		var due int64
		if g.rate > 0 {
			due = g.t0 + int64(float64(seq)*1e9/g.rate)
			if idl != nil && due > g.clk.now() {
				if err := idl.idle(); err != nil {
					return fmt.Errorf("client %d, message %d: %w", c, seq, err)
				}
			}
			g.clk.sleepUntil(due)
		}
		now := g.clk.now()
		if g.rate <= 0 {
			due = now
		} else if lag := now - due; lag > g.maxLagNs[c] {
			g.maxLagNs[c] = lag
		}
		st := stamp.Stamp{Seq: seq, SentNs: due}
		g.sentAt[seq] = now
		g.intended[seq] = due
		var err error
		if ss != nil {
			err = ss.sendStamp(ctx, st, now)
		} else {
			p := make([]byte, len(g.template))
			copy(p, g.template)
			stamp.Put(p, st)
			err = s.send(ctx, seq, p)
		}
		if err != nil {
			return fmt.Errorf("client %d, message %d: %w", c, seq, err)
		}
		sent++
	}
	g.lastNs[c] = g.clk.now()
	return s.flush(ctx)
}

// genStats summarises the generator after run.
type genStats struct {
	sent          int64
	firstNs       int64 // first actual send
	lastNs        int64 // last actual send returned
	measuredNs    int64 // first intended time of a measured message
	achievedRate  float64
	maxLagNs      int64
	requestedRate float64
}

func (g *generator) stats() genStats {
	st := genStats{sent: g.sent.Load(), requestedRate: g.rate}
	for _, l := range g.lastNs {
		st.lastNs = max(st.lastNs, l)
	}
	for seq := uint32(0); seq < g.total; seq++ {
		at := g.sentAt[seq]
		if at == 0 {
			continue
		}
		if st.firstNs == 0 || at < st.firstNs {
			st.firstNs = at
		}
		if seq >= g.warmup && (st.measuredNs == 0 || g.intended[seq] < st.measuredNs) {
			st.measuredNs = g.intended[seq]
		}
	}
	if st.sent > 1 && st.lastNs > st.firstNs {
		st.achievedRate = float64(st.sent-1) * 1e9 / float64(st.lastNs-st.firstNs)
	}
	for _, l := range g.maxLagNs {
		st.maxLagNs = max(st.maxLagNs, l)
	}
	return st
}

func (st genStats) describe() string {
	if st.requestedRate > 0 {
		verdict := "achieved"
		if st.achievedRate < 0.98*st.requestedRate || st.maxLagNs > 10e6 {
			verdict = "BEHIND SCHEDULE (latencies include the generator's lag)"
		}
		return fmt.Sprintf("generator: open loop, requested %.0f msg/s, sent %d at %.0f msg/s, max lag behind schedule %.3f ms: %s",
			st.requestedRate, st.sent, st.achievedRate, float64(st.maxLagNs)/1e6, verdict)
	}
	return fmt.Sprintf("generator: closed loop (no --rate), sent %d at %.0f msg/s", st.sent, st.achievedRate)
}
