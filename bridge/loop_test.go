package bridge

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
	"github.com/ferry-bridge/ferry/topicmap"
)

// publishN publishes n QoS 1 messages "0.<i>" (pipelined) and waits for
// every PUBACK.
func publishN(t testing.TB, c paho.Client, topic string, from, n int) {
	t.Helper()
	toks := make([]paho.Token, 0, n)
	for i := from; i < from+n; i++ {
		toks = append(toks, c.Publish(topic, 1, false, "0."+strconv.Itoa(i)))
	}
	for i, tok := range toks {
		if !tok.WaitTimeout(60*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %d: %v", from+i, tok.Error())
		}
	}
}

// TestLoopOverlappingRules: a forward rule sends loop<hex>/# to a Kafka
// topic that the same instance consumes back to MQTT under loop<hex>/
// (records carry mqtt.topic, so they return to the very topic they came
// from). Without the guards every message would circle forever. With
// skip_own the reverse path skips its own records; without it the records
// are published once more to MQTT, but inline publishes are never bridged, so
// Kafka still holds exactly one record per message. A sentinel published
// last proves nothing else is on its way. It runs with the default
// kafka.headers, which must keep ferry.origin.
func TestLoopOverlappingRules(t *testing.T) {
	for _, skipOwn := range []bool{true, false} {
		t.Run(fmt.Sprintf("skip_own=%v", skipOwn), func(t *testing.T) {
			brokers := kafkatest.Brokers(t)
			n := scaled(1000, 200)
			hex := randHex(4)
			filter := "ferryloop" + hex + "/#"
			k := "_ferryloop" + hex
			kafkatest.CreateTopic(t, brokers, k, 1, nil)
			cfg := testConfig(brokers)
			cfg.Topics.Forward = []topicmap.ForwardRule{{Filter: filter, Topic: k}}
			cfg.Topics.Reverse = []topicmap.ReverseRule{{Kafka: k, MQTT: "ferryloop" + hex + "/back", QoS: topicmap.QoS(1)}}
			cfg.Reverse.Topics = []string{k}
			cfg.Reverse.StartOffset = "earliest"
			cfg.Reverse.SkipOwn = skipOwn
			b := startBridge(t, cfg)
			col := &collector{}
			subscribePaho(t, b.MQTTAddr(), "loop-sub-"+hex, filter, true, col)
			pub := connectPaho(t, b.MQTTAddr(), "loop-pub-"+hex)

			handled := func() float64 {
				return metricValue(t, b, "ferry_reverse_published_total", nil) +
					metricValue(t, b, "ferry_reverse_skipped_total", map[string]string{"reason": "own_origin"})
			}
			publishN(t, pub, "ferryloop"+hex+"/a", 0, n)
			waitFor(t, 60*time.Second, "reverse path handled every record", func() bool { return handled() >= float64(n) })
			publishN(t, pub, "ferryloop"+hex+"/a", n, 1) // sentinel
			waitFor(t, 60*time.Second, "sentinel handled", func() bool { return handled() >= float64(n+1) })

			perMsg := 1
			if !skipOwn {
				perMsg = 2
			}
			waitFor(t, 30*time.Second, "subscriber count", func() bool { return col.len() >= perMsg*(n+1) })
			records := kafkatest.RecordCount(t, brokers, k)
			consumed := metricValue(t, b, "ferry_reverse_records_consumed_total", nil)
			published := metricValue(t, b, "ferry_reverse_published_total", nil)
			t.Logf("skip_own=%v: %d MQTT publishes -> %d Kafka records, %v consumed, %v republished, subscriber got %d",
				skipOwn, n+1, records, consumed, published, col.len())
			if records != int64(n+1) {
				t.Errorf("Kafka holds %d records, want exactly %d", records, n+1)
			}
			// The guards hold with the default kafka.headers: the records
			// carry it, no more (QoS 1, not retained, no expiry).
			var keys []string
			for _, h := range readTopic(t, b.KafkaBrokers(), k, 1, 10*time.Second)[0].Headers {
				keys = append(keys, h.Key)
			}
			if want := []string{"mqtt.topic", "mqtt.qos", "mqtt.client_id", "ferry.origin", "mqtt.packet_id"}; !slices.Equal(keys, want) {
				t.Errorf("records carry %q, want the default set %q", keys, want)
			}
			if consumed != float64(n+1) {
				t.Errorf("reverse consumed %v records, want %d", consumed, n+1)
			}
			if got := col.len(); got != perMsg*(n+1) {
				t.Errorf("subscriber got %d messages, want %d", got, perMsg*(n+1))
			}
			wantPub := 0
			if !skipOwn {
				wantPub = n + 1
			}
			if published != float64(wantPub) {
				t.Errorf("republished %v, want %d", published, wantPub)
			}
		})
	}
}
