package bridge

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
)

// memSnap is one reading of a cmd/bridge process, taken after a forced GC.
type memSnap struct {
	rss, stack, heap, goroutines float64
}

func (p *ferryProcess) memSnapshot(t testing.TB) memSnap {
	t.Helper()
	// /debug/pprof/heap?gc=1 runs runtime.GC() first: heap figures without
	// garbage, comparable between readings.
	for range 3 {
		if _, err := p.get("/debug/pprof/heap?gc=1"); err != nil {
			t.Fatalf("%s: forcing a GC: %v", p.name, err)
		}
	}
	s := memSnap{
		rss:        float64(procRSS(t, p.pid())),
		stack:      p.metric("go_memstats_stack_inuse_bytes"),
		heap:       p.metric("go_memstats_heap_inuse_bytes"),
		goroutines: p.metric("go_goroutines"),
	}
	if s.stack < 0 || s.heap < 0 || s.goroutines < 0 {
		t.Fatalf("%s: go_memstats_* or go_goroutines missing from /metrics", p.name)
	}
	return s
}

// perConn is the growth from base to s divided by n connections.
func (s memSnap) perConn(base memSnap, n int) memSnap {
	f := float64(n)
	return memSnap{rss: (s.rss - base.rss) / f, stack: (s.stack - base.stack) / f,
		heap: (s.heap - base.heap) / f, goroutines: (s.goroutines - base.goroutines) / f}
}

func (s memSnap) String() string {
	return fmt.Sprintf("RSS %.1f KiB, stacks %.1f KiB, heap %.1f KiB, %.2f goroutines", s.rss/1024, s.stack/1024, s.heap/1024, s.goroutines)
}

// Per idle connection: the design target is <= 16 KiB of RSS (goal 10).
// mochi's model alone costs 20 KiB of goroutine stacks (a read goroutine
// that needs ~11.7 KiB while reading CONNECT and keeps over 4 KiB live while
// idle, so its stack grows to 16 KiB and never shrinks back,
// and a write goroutine whose idle frame holds ~2 KiB, 4 KiB of stack),
// which Ferry cannot change without forking mochi (README "Scale" says
// which mochi change removes it). What Ferry controls is asserted: no
// goroutine of its own per connection, nothing that deepens mochi's
// stacks, and a heap of mochi's base (~5.5 KiB: read buffer, client
// state, socket) plus the outbound queue mqtt.client_writes_pending sizes
// (8 bytes a slot, allocated at connect).
const (
	targetIdleConnKiB   = 16
	baseIdleConnHeapKiB = 7
	// sessionClaimHeapKiB: the session claim every connection writes to
	// the sessions topic (fencing a second connection of its client id on
	// another instance), kept as a table row and an ownership record.
	sessionClaimHeapKiB = 2
	mochiIdleStackKiB   = 20
	mochiConnGoroutines = 2
)

// TestIdleConnectionMemory (issue 18, item 1): the real cmd/bridge binary
// (built without -race) with the default configuration holds 1,000, then
// 10,000 idle MQTT 3.1.1 connections (CONNECT, then nothing). Reports RSS,
// goroutine stacks, heap and goroutines per connection, and the RSS
// projected to 100,000 connections from the slope between the two points
// (this machine allows 20,000 descriptors for both ends together, so
// 100,000 cannot be measured here). Fails when an idle connection holds
// more heap, stack, goroutines or RSS than the bounds below.
func TestIdleConnectionMemory(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	steps := []int{1000, 10000}
	if os.Getenv("FERRY_MEM_STEPS") == "small" {
		steps = []int{500, 2000}
	}
	total := steps[len(steps)-1]
	if lim := raiseNoFile(t, uint64(total+4096)); lim < uint64(total+1024) {
		t.Fatalf("RLIMIT_NOFILE is %d: %d connections need %d", lim, total, total+1024)
	}
	env := []string{"FERRY_KAFKA_BROKERS=" + brokers, "FERRY_INSTANCE_ID=mem-" + randHex(3), "FERRY_HTTP_PPROF=true"}
	// The default configuration; FERRY_TEST_WRITES_PENDING=N measures
	// another mqtt.client_writes_pending.
	pending := DefaultConfig().MQTT.ClientWritesPending
	if v := os.Getenv("FERRY_TEST_WRITES_PENDING"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("FERRY_TEST_WRITES_PENDING=%q: %v", v, err)
		}
		pending = n
		env = append(env, "FERRY_MQTT_CLIENT_WRITES_PENDING="+v)
	}
	p := startFerry(t, "ferry-mem", "", env...)
	conns := make([]*lightClient, total)
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.close()
			}
		}
	})
	base := p.memSnapshot(t)
	t.Logf("before any connection: RSS %.1f MiB, stacks %.1f MiB, heap %.1f MiB, %v goroutines",
		base.rss/(1<<20), base.stack/(1<<20), base.heap/(1<<20), base.goroutines)
	from := 0
	var snaps []memSnap
	for _, n := range steps {
		took := connectLights(t, p.MQTTAddr, "mem"+randHex(3), conns, from, n)
		from = n
		waitFor(t, 30*time.Second, fmt.Sprintf("%d connections counted", n), func() bool {
			return p.metric("ferry_mqtt_connections") == float64(n)
		})
		s := p.memSnapshot(t)
		snaps = append(snaps, s)
		t.Logf("%6d idle connections (connected in %s): per connection %s", n, took.Round(time.Millisecond), s.perConn(base, n))
	}
	if out := os.Getenv("FERRY_MEM_PROFILE"); out != "" {
		prof, err := p.get("/debug/pprof/heap")
		if err == nil {
			err = os.WriteFile(out, []byte(prof), 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	first, last := snaps[0], snaps[len(snaps)-1]
	slope := last.perConn(first, steps[len(steps)-1]-steps[0])
	projected := base.rss + slope.rss*100000
	t.Logf("slope %d -> %d: %s; projected RSS at 100,000 connections: %.0f MiB (%.1f KiB each)",
		steps[0], total, slope, projected/(1<<20), slope.rss/1024)
	per := last.perConn(base, total)
	if maxHeap := baseIdleConnHeapKiB + sessionClaimHeapKiB + float64(pending*9)/1024; per.heap/1024 > maxHeap {
		t.Errorf("an idle connection holds %.1f KiB of heap, want <= %.1f KiB (mochi's base %d KiB + its session claim %d KiB + a %d-slot outbound queue)",
			per.heap/1024, maxHeap, baseIdleConnHeapKiB, sessionClaimHeapKiB, pending)
	}
	if per.goroutines > mochiConnGoroutines+0.01 {
		t.Errorf("%.2f goroutines per idle connection, want mochi's %d", per.goroutines, mochiConnGoroutines)
	}
	// Slack of 1 KiB: the average lands at 20.5-20.6 KiB on some runs; a
	// stack doubling or an extra goroutine (+8 KiB or more) still fails.
	if got := per.stack / 1024; got > mochiIdleStackKiB+1 {
		t.Errorf("%.1f KiB of goroutine stack per idle connection, want mochi's %d KiB", got, mochiIdleStackKiB)
	}
	// RSS: what an idle connection may hold is mochi's stacks and the heap
	// bounded above, plus one page of runtime and allocator slack; more is
	// memory outside what is accounted for (off-heap buffers, a leak). The
	// design goal (16 KiB) is out of reach while mochi's stacks alone take
	// 20 KiB: it is reported, not asserted.
	maxRSS := mochiIdleStackKiB + baseIdleConnHeapKiB + float64(pending*9)/1024 + 4
	if got := per.rss / 1024; got > maxRSS {
		t.Errorf("%.1f KiB of RSS per idle connection, want <= %.1f KiB (mochi's %d KiB of stacks + the heap bound + 4 KiB)",
			got, maxRSS, mochiIdleStackKiB)
	}
	t.Logf("RSS per idle connection %.1f KiB (bound %.1f KiB; design goal %d KiB, of which mochi's stacks alone take %.1f KiB)",
		per.rss/1024, maxRSS, targetIdleConnKiB, per.stack/1024)
}

// TestIdleConnectionsHoldNoSessionState: Ferry's per-connection state (the
// in-order PUBACK queue and its in-flight slots) exists only once a client
// has sent a QoS 1 publish; idle and QoS 0 clients have none.
func TestIdleConnectionsHoldNoSessionState(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	b := startBridge(t, testConfig(brokers))
	sessions := func() int {
		n := 0
		b.hook.queues.Range(func(any, any) bool { n++; return true })
		return n
	}
	conns := make([]*lightClient, 50)
	connectLights(t, b.MQTTAddr(), "idle"+randHex(3), conns, 0, len(conns))
	defer func() {
		for _, c := range conns {
			c.close()
		}
	}()
	waitFor(t, 10*time.Second, "50 connections", func() bool { return metricValue(t, b, "ferry_mqtt_connections", nil) == 50 })
	if n := sessions(); n != 0 {
		t.Fatalf("%d idle connections hold Ferry session state", n)
	}
	topic := uniqueTopic("idle")
	publish := func(c *lightClient, qos byte) {
		t.Helper()
		if err := c.appendPublish(4, topic, qos, 1, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := c.flush(); err != nil {
			t.Fatal(err)
		}
	}
	publish(conns[0], 0)
	publish(conns[1], 1)
	_ = conns[1].conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if typ, _, err := conns[1].read(); err != nil || typ>>4 != 4 {
		t.Fatalf("no PUBACK for the QoS 1 publish: type %#x, %v", typ, err)
	}
	waitFor(t, 10*time.Second, "the QoS 0 publish counted", func() bool {
		return metricValue(t, b, "ferry_mqtt_publishes_received_total", map[string]string{"qos": "0"}) == 1
	})
	if n := sessions(); n != 1 {
		t.Fatalf("%d connections hold session state after one QoS 1 and one QoS 0 publish, want 1", n)
	}
}
