package bridge

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
)

// BenchmarkStore measures what durability costs per QoS 1 delivery to a
// persistent session: the store writes the in-flight message and deletes it
// at the PUBACK (two writes). Modes: group (the bridge's: no fsync per write,
// one fsync per 1,000 deliveries here, per 200 ms in the bridge), sync
// (fsync every write), nosync (never fsync). Run:
//
//	go test -run '^$' -bench BenchmarkStore -benchtime 2s ./bridge/
func BenchmarkStore(b *testing.B) {
	for _, mode := range []struct {
		name string
		mode storeMode
	}{{"group", storeModeGroup}, {"sync", storeModeSync}, {"nosync", storeModeNoSync}} {
		b.Run(mode.name, func(b *testing.B) {
			srv := mqtt.New(&mqtt.Options{})
			order := newInflightOrder(srv)
			st, err := openStore(b.TempDir(), mode.mode, testLogger(b), order)
			if err != nil {
				b.Fatal(err)
			}
			defer st.Stop()
			cl := srv.NewClient(nil, "bench", "bench-sub", false)
			cl.Properties.ProtocolVersion = 4 // clean session false: persistent
			pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
				TopicName: "/bench/topic", Payload: make([]byte, 12), Created: time.Now().Unix()}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				pk.PacketID = uint16(i%65535 + 1)
				order.OnQosPublish(cl, pk, 0, 0)
				st.OnQosPublish(cl, pk, 0, 0)
				st.OnQosComplete(cl, pk)
				order.OnQosComplete(cl, pk)
				if mode.mode == storeModeGroup && i%1000 == 999 {
					if err := st.sync(); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deliveries/s")
		})
	}
}

// BenchmarkReverseSession measures the reverse path to one persistent QoS 1
// subscriber (paho, clean session false) with and without storage.dir, on
// the real Kafka: "burst" delivers b.N records produced beforehand (msg/s),
// "rate1000" b.N records produced at 1,000/s (p50/p99 from produce to
// receipt). Run:
//
//	go test -run '^$' -bench BenchmarkReverseSession -benchtime 50000x ./bridge/   # burst
//	go test -run '^$' -bench 'BenchmarkReverseSession/rate1000' -benchtime 5000x ./bridge/
func BenchmarkReverseSession(b *testing.B) {
	for _, kind := range []string{"burst", "rate1000"} {
		for _, durable := range []bool{false, true} {
			name := kind + "/memory"
			if durable {
				name = kind + "/store"
			}
			b.Run(name, func(b *testing.B) { benchReverseSession(b, kind == "rate1000", durable) })
		}
	}
}

func benchReverseSession(b *testing.B, paced, durable bool) {
	brokers := kafkatest.Brokers(b)
	k, m := revTopic(b, "bench")
	kafkatest.CreateTopic(b, brokers, k, 1, nil)
	cfg := reverseConfig(brokers, k)
	if durable {
		cfg.Storage.Dir = b.TempDir()
	}
	hold := make(chan struct{})
	cfg.reverseHold = hold
	br := startBridge(b, cfg)
	var got atomic.Int64
	var mu sync.Mutex
	lat := make([]time.Duration, 0, b.N)
	sub := connectPaho(b, br.MQTTAddr(), "bench-"+randHex(4), func(o *paho.ClientOptions) {
		o.SetCleanSession(false).SetOrderMatters(true)
	})
	if tok := sub.Subscribe(m, 1, func(_ paho.Client, msg paho.Message) {
		if p := msg.Payload(); len(p) == 8 {
			d := time.Since(time.Unix(0, int64(binary.BigEndian.Uint64(p))))
			mu.Lock()
			lat = append(lat, d)
			mu.Unlock()
		}
		got.Add(1)
	}); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		b.Fatalf("subscribe: %v", tok.Error())
	}
	prod := kgoProducer(b, brokers)
	stamp := func() []byte { return binary.BigEndian.AppendUint64(nil, uint64(time.Now().UnixNano())) }
	if !paced {
		recs := make([]*kgo.Record, b.N)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: k, Value: []byte(fmt.Sprintf("r%07d", i))}
		}
		produceAll(b, prod, recs)
	}
	b.ResetTimer()
	close(hold)
	if paced {
		tick := time.NewTicker(time.Millisecond)
		for range b.N {
			<-tick.C
			prod.Produce(b.Context(), &kgo.Record{Topic: k, Value: stamp()}, nil)
		}
		tick.Stop()
	}
	deadline := time.Now().Add(5 * time.Minute)
	for got.Load() < int64(b.N) {
		if time.Now().After(deadline) {
			b.Fatalf("received %d of %d", got.Load(), b.N)
		}
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
	if paced {
		mu.Lock()
		slices.Sort(lat)
		q := func(f float64) float64 { return float64(lat[min(int(f*float64(len(lat))), len(lat)-1)]) / 1e6 }
		b.ReportMetric(q(0.5), "p50-ms")
		b.ReportMetric(q(0.99), "p99-ms")
		mu.Unlock()
	}
}
