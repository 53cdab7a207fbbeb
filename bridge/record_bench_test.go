package bridge

import (
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ferry-bridge/ferry/topicmap"
)

// BenchmarkNewRecord measures building one forward record (key, headers)
// for a 12-byte QoS 1 publish under the default rule, as the hook does for
// every PUBLISH, with the default kafka.headers and with all (the set of
// Ferry before kafka.headers). Only allocs/op and B/op are stable on a
// shared machine.
//
//	go test -run '^$' -bench NewRecord -benchmem -benchtime 200000x ./bridge/
func BenchmarkNewRecord(b *testing.B) {
	tm, err := topicmap.New(topicmap.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	cl := &mqtt.Client{ID: "sensor-client-0042"}
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: 4711,
		TopicName: "sensors/dev42/temp", Payload: []byte("21.5C@120000")}
	for _, set := range []struct {
		name string
		set  topicmap.HeaderSet
		n    int // no retain, no expiry
	}{{"headers=default", topicmap.DefaultHeaders, 5}, {"headers=all", topicmap.AllHeaders, 6}} {
		b.Run(set.name, func(b *testing.B) {
			h := benchRecordHook(tm, set.set)
			var pc pubCache // a connection's, as OnPublish passes it
			b.ReportAllocs()
			for b.Loop() {
				route, err := pc.forward(tm, pk.TopicName)
				if err != nil {
					b.Fatal(err)
				}
				if rec := h.newRecord(cl, pk, route, &pc); len(rec.Headers) != set.n {
					b.Fatalf("%d headers, want %d", len(rec.Headers), set.n)
				}
			}
		})
	}
}

func benchRecordHook(tm *topicmap.Map, set topicmap.HeaderSet) *hook {
	return &hook{tm: tm, hdrs: topicmap.NewHeaderBuilder(set, "ferry-bench-1")}
}
