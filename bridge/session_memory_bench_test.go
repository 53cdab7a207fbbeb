package bridge

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
)

// BenchmarkOfflineSessionMemory: what an offline persistent session costs
// the instance that owned it and another instance. Two cmd/bridge processes
// (default configuration, built without -race) share one Kafka; N MQTT
// 3.1.1 clients (FERRY_BENCH_SESSIONS, default 20,000) each connect to the
// first with clean session 0, subscribe to a filter of their own at QoS 1
// and disconnect. Reported once both instances count N offline sessions:
// the RSS growth per offline session on each 20 s later, read from /proc
// with no GC forced (B-RSS-20s: what a user sees; the targets: 1 KiB on the
// owner, 512 B elsewhere; Mosquitto, in memory: 856 B); then, after a
// forced GC, RSS and heap per offline session, and
// the time of one /metrics scrape (target: under 50 ms); then how long a
// fresh third instance takes to be ready with them in Kafka (target with
// 100,000: 3 s).
//
//	go test -run '^$' -bench BenchmarkOfflineSessionMemory -benchtime 1x ./bridge/
//
// FERRY_BENCH_SETTLE=60s also reports the RSS once the runtime has given
// back what the sessions' connections used (see below).
func BenchmarkOfflineSessionMemory(b *testing.B) {
	brokers := kafkatest.Brokers(b)
	n := benchSessions(b, 20000)
	env := []string{"FERRY_KAFKA_BROKERS=" + brokers, "FERRY_HTTP_PPROF=true"}
	run := randHex(3)
	owner := startFerry(b, "ferry-owner", "", append(env, "FERRY_INSTANCE_ID=memo-"+run)...)
	other := startFerry(b, "ferry-other", "", append(env, "FERRY_INSTANCE_ID=memx-"+run)...)
	offline := func(p *ferryProcess) float64 { return p.metric(`ferry_sessions{state="offline"}`) }
	waitFor(b, 60*time.Second, "both instances loaded", func() bool { return offline(owner) >= 0 && offline(other) >= 0 })
	base := map[*ferryProcess]memSnap{owner: owner.memSnapshot(b), other: other.memSnapshot(b)}
	b.ResetTimer()
	for range b.N {
		made := dialEach(b, 32, 0, n, "sessions failed", func(d *net.Dialer, i int) error {
			return offlineSession(d, owner.MQTTAddr, fmt.Sprintf("mem%s-%d", run, i))
		})
		for _, p := range []*ferryProcess{owner, other} {
			waitFor(b, 5*time.Minute, p.name+" counts every session offline", func() bool { return offline(p) == float64(n) })
		}
		b.StopTimer()
		// As a user sees it: the RSS read from /proc 20 s after the
		// sessions were made, no GC forced (the targets are for this one).
		time.Sleep(20 * time.Second)
		for _, p := range []*ferryProcess{owner, other} {
			grown := float64(procRSS(b, p.pid())) - base[p].rss
			b.ReportMetric(grown/float64(n), "B-RSS-20s/session-"+p.name[len("ferry-"):])
			b.Logf("%s: RSS per offline session 20 s after, no GC forced: %.0f B", p.name, grown/float64(n))
		}
		// Right after the sessions were made, the Go runtime still holds
		// the memory their connections used (freed, not yet returned to the
		// system); FERRY_BENCH_SETTLE=60s also reports the RSS once it has
		// stopped falling (read every 5 s, within that time).
		settle, _ := time.ParseDuration(os.Getenv("FERRY_BENCH_SETTLE"))
		for _, p := range []*ferryProcess{owner, other} {
			per := p.memSnapshot(b).perConn(base[p], n)
			if settle > 0 {
				rss := per.rss
				for deadline := time.Now().Add(settle); time.Now().Before(deadline); {
					time.Sleep(5 * time.Second)
					now := p.memSnapshot(b).perConn(base[p], n).rss
					if now > rss*0.99 {
						rss = min(rss, now)
						break
					}
					rss = now
				}
				b.ReportMetric(rss, "B-RSS-settled/session-"+p.name[len("ferry-"):])
				b.Logf("%s: RSS per session %.1f KiB once settled", p.name, rss/1024)
			}
			b.ReportMetric(per.rss, "B-RSS/session-"+p.name[len("ferry-"):])
			b.ReportMetric(per.heap, "B-heap/session-"+p.name[len("ferry-"):])
			t0 := time.Now()
			if _, err := p.get("/metrics"); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(time.Since(t0).Microseconds())/1000, "ms-scrape-"+p.name[len("ferry-"):])
			b.Logf("%s: %d offline sessions (made in %s): per session %s", p.name, n, made.Round(time.Millisecond), per)
			// FERRY_BENCH_HEAP_DIR=dir keeps each process's heap profile
			// (go tool pprof -sample_index=inuse_space dir/ferry-other.heap).
			if dir := os.Getenv("FERRY_BENCH_HEAP_DIR"); dir != "" {
				prof, err := p.get("/debug/pprof/heap")
				if err == nil {
					err = os.WriteFile(filepath.Join(dir, p.name+".heap"), []byte(prof), 0o600)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		}
		// A fresh instance among them: how long until it is ready
		// (/readyz) and counts every session, and one scrape of it
		// (target with 100,000 sessions: ready within 3 s, scrape under
		// 50 ms).
		t0 := time.Now()
		fresh := startFerry(b, "ferry-fresh", "", append(env, "FERRY_INSTANCE_ID=memf-"+run)...)
		ready := time.Since(t0)
		waitFor(b, 5*time.Minute, "the fresh instance counts every session offline", func() bool { return offline(fresh) == float64(n) })
		loaded := time.Since(t0)
		t1 := time.Now()
		if _, err := fresh.get("/metrics"); err != nil {
			b.Fatal(err)
		}
		scrape := time.Since(t1)
		b.ReportMetric(ready.Seconds(), "s-ready-fresh")
		b.ReportMetric(float64(scrape.Microseconds())/1000, "ms-scrape-fresh")
		b.Logf("a fresh instance with %d offline sessions in Kafka: ready (/readyz) %s after its start, counting all of them %s after, one scrape %s",
			n, ready.Round(time.Millisecond), loaded.Round(time.Millisecond), scrape.Round(time.Microsecond))
	}
}

// offlineSession makes a persistent session for id (clean session 0, one
// QoS 1 subscription, acknowledged) and leaves it with DISCONNECT.
func offlineSession(d *net.Dialer, addr, id string) error {
	c, err := dialLightConnect(d, addr, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 4,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: false, Keepalive: 300, ClientIdentifier: id}})
	if err != nil {
		return err
	}
	defer c.close()
	if err := c.subscribe(4, "mem/"+id+"/#", 1); err != nil {
		return err
	}
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Disconnect}, ProtocolVersion: 4}
	if err := pk.DisconnectEncode(&c.out); err != nil {
		return err
	}
	return c.flush()
}
