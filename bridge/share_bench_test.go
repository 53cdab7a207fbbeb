package bridge

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pahov3 "github.com/eclipse/paho.mqtt.golang"
)

// BenchmarkShareGroup: one shared subscription with 10 QoS 1 members
// spread over three instances (4, 3, 3) on the real Kafka, 8 topics.
// First the delivery latency at 1,000 msg/s for 5 s from one publisher
// (p50/p99/max, publish call to a member's handler), then the throughput
// of b.N messages (at least 20,000) from 4 publishers, from the first
// publish to the last delivery (msg/s), beside the forward path's rate of
// one instance with the same publishers (fwd-msg/s: all PUBACKs, nobody
// subscribed) and their ratio (x-fwd). The publishers and members run in this
// process, beside the three instances and Kafka: on a small machine they
// are part of what is measured.
//
// It also reports this process's CPU time per message of each phase
// (lat-cpu-us, fwd-cpu-us, share-cpu-us: the instances, publishers and
// members together; Kafka's own is not in it), steadier than the rates on
// a shared machine. FERRY_SHARE_BENCH_PROFILE=dir writes a CPU profile of
// each phase there (latency.cpu, fwd.cpu, share.cpu; not with -cpuprofile).
//
//	go test -run '^$' -bench ShareGroup -benchtime 40000x ./bridge/
func BenchmarkShareGroup(b *testing.B) {
	in := threeInstances(b)
	tag := randHex(4)
	const topics = 8
	names := make([]string, topics)
	warm := connectPaho(b, in[0].MQTTAddr(), "sbwarm-"+tag)
	for i := range names {
		names[i] = fmt.Sprintf("sb%s/%d", tag, i)
		warm.Publish(names[i], 1, false, "w").WaitTimeout(10 * time.Second)
	}
	key := "$share/g" + tag + "/sb" + tag + "/+"
	var (
		mu        sync.Mutex
		latencies []time.Duration
		measuring atomic.Bool
		received  atomic.Int64
	)
	for m := range 10 {
		inst := in[m%3]
		if m == 9 {
			inst = in[0]
		}
		c := connectPaho(b, inst.MQTTAddr(), fmt.Sprintf("sbm%d-%s", m, tag), func(o *pahov3.ClientOptions) {
			o.SetDefaultPublishHandler(func(_ pahov3.Client, msg pahov3.Message) {
				p := msg.Payload()
				if len(p) < 8 {
					return
				}
				received.Add(1)
				if measuring.Load() {
					d := time.Since(time.Unix(0, int64(binary.BigEndian.Uint64(p))))
					mu.Lock()
					latencies = append(latencies, d)
					mu.Unlock()
				}
			})
		})
		c.Subscribe(key, 1, nil).WaitTimeout(10 * time.Second)
	}
	waitSplit(b, key, topics, in[:]...)
	payload := func(i int) []byte {
		p := make([]byte, 12)
		binary.BigEndian.PutUint64(p, uint64(time.Now().UnixNano()))
		binary.BigEndian.PutUint32(p[8:], uint32(i))
		return p
	}
	waitReceived := func(n int64, what string) {
		deadline := time.Now().Add(120 * time.Second)
		for received.Load() < n {
			if time.Now().After(deadline) {
				for i, x := range in {
					l := map[string]string{"group": key}
					b.Logf("instance %d: partitions %.0f, lag %.0f, delivered %.0f, redelivered %.0f", i,
						metricValue(b, x, "ferry_share_partitions", l), metricValue(b, x, "ferry_share_lag", l),
						metricValue(b, x, "ferry_share_delivered_total", l), metricValue(b, x, "ferry_share_redelivered_total", l))
				}
				b.Fatalf("%s: %d of %d received", what, received.Load(), n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// Latency at 1,000 msg/s.
	pub := connectPaho(b, in[0].MQTTAddr(), "sbpub-"+tag)
	base := received.Load()
	measuring.Store(true)
	const rate, secs = 1000, 5
	stopProfile := phaseProfile(b, "latency.cpu")
	cpu0 := processCPU(b)
	tick := time.NewTicker(time.Second / rate)
	var toks []pahov3.Token
	for i := range rate * secs {
		<-tick.C
		toks = append(toks, pub.Publish(names[i%topics], 1, false, payload(i)))
	}
	tick.Stop()
	for _, t := range toks {
		t.WaitTimeout(10 * time.Second)
	}
	waitReceived(base+rate*secs, "every message of the latency run")
	latCPU := processCPU(b) - cpu0
	stopProfile()
	measuring.Store(false)
	mu.Lock()
	slices.Sort(latencies)
	q := func(f float64) float64 {
		return float64(latencies[int(f*float64(len(latencies)-1))].Microseconds()) / 1000
	}
	p50, p99, pmax := q(0.5), q(0.99), float64(latencies[len(latencies)-1].Microseconds())/1000
	mu.Unlock()

	// Throughput: 4 publishers, a window of about 256 in flight each.
	n := max(b.N, 20000)
	send := func(pubs []pahov3.Client, topic func(i int) string) {
		var wg sync.WaitGroup
		for w := range pubs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var last pahov3.Token
				for i := w; i < n; i += len(pubs) {
					last = pubs[w].Publish(topic(i), 1, false, payload(i))
					if i%256 == w {
						last.WaitTimeout(10 * time.Second)
					}
				}
				if last != nil {
					last.WaitTimeout(30 * time.Second)
				}
			}()
		}
		wg.Wait()
	}
	// The forward path of one instance with the same publishers, to a
	// topic nobody subscribes to: every PUBACK means the record is in
	// Kafka.
	fwd := make([]pahov3.Client, 4)
	for i := range fwd {
		fwd[i] = connectPaho(b, in[0].MQTTAddr(), fmt.Sprintf("sbfw%d-%s", i, tag))
	}
	stopProfile = phaseProfile(b, "fwd.cpu")
	cpu0 = processCPU(b)
	start := time.Now()
	send(fwd, func(int) string { return "sbfwd" + tag + "/x" })
	fwdRate := float64(n) / time.Since(start).Seconds()
	fwdCPU := processCPU(b) - cpu0
	stopProfile()

	pubs := make([]pahov3.Client, 4)
	for i := range pubs {
		pubs[i] = connectPaho(b, in[i%3].MQTTAddr(), fmt.Sprintf("sbtp%d-%s", i, tag))
	}
	base = received.Load()
	b.ResetTimer()
	stopProfile = phaseProfile(b, "share.cpu")
	cpu0 = processCPU(b)
	start = time.Now()
	send(pubs, func(i int) string { return names[i%topics] })
	waitReceived(base+int64(n), "every message of the throughput run")
	took := time.Since(start)
	b.StopTimer()
	shareCPU := processCPU(b) - cpu0
	stopProfile()
	b.ReportMetric(float64(n)/took.Seconds(), "msg/s")
	b.ReportMetric(fwdRate, "fwd-msg/s")
	b.ReportMetric(float64(n)/took.Seconds()/fwdRate, "x-fwd")
	b.ReportMetric(p50, "p50-ms") // after ResetTimer, which drops reported metrics
	b.ReportMetric(p99, "p99-ms")
	b.ReportMetric(pmax, "max-ms")
	b.ReportMetric(float64(latCPU.Microseconds())/(rate*secs), "lat-cpu-us")
	b.ReportMetric(float64(fwdCPU.Microseconds())/float64(n), "fwd-cpu-us")
	b.ReportMetric(float64(shareCPU.Microseconds())/float64(n), "share-cpu-us")
}

// phaseProfile starts a CPU profile of this process into
// $FERRY_SHARE_BENCH_PROFILE/name, if set; the func stops it and logs
// when the phase ran.
func phaseProfile(b *testing.B, name string) func() {
	dir := os.Getenv("FERRY_SHARE_BENCH_PROFILE")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	return func() {
		pprof.StopCPUProfile()
		// To match against other processes' CPU samples (Kafka's).
		b.Logf("phase %s: unix ms %d to %d", name, start.UnixMilli(), time.Now().UnixMilli())
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
