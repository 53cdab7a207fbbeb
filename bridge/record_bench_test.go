package bridge

import (
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ferry-bridge/ferry/topicmap"
)

// BenchmarkNewRecord measures building one forward record (key, headers)
// for a 12-byte QoS 1 publish under the default rule, as the hook does for
// every PUBLISH. Only allocs/op and B/op are stable on a shared machine.
//
//	go test -run '^$' -bench NewRecord -benchmem -benchtime 200000x ./bridge/
func BenchmarkNewRecord(b *testing.B) {
	tm, err := topicmap.New(topicmap.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	h := benchRecordHook(b, tm)
	cl := &mqtt.Client{ID: "sensor-client-0042"}
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: 4711,
		TopicName: "sensors/dev42/temp", Payload: []byte("21.5C@120000")}
	route, err := tm.Forward(pk.TopicName)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if rec := h.newRecord(cl, pk, route); len(rec.Headers) == 0 {
			b.Fatal("no headers")
		}
	}
}

func benchRecordHook(_ *testing.B, tm *topicmap.Map) *hook {
	return &hook{tm: tm, origin: []byte("ferry-bench-1")}
}
