package bridge

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// BenchmarkProduceRaw is BenchmarkProduce with raw pre-encoded MQTT 3.1.1
// publishers (4 connections, one topic each, 256 QoS 1 publishes in flight
// per connection), so the client library is not the limit: ns/op is the
// bridge's cost per acknowledged message (PUBACK after Kafka's ack).
//
//	FERRY_TEST_KAFKA=127.0.0.1:9092 go test -run '^$' -bench ProduceRaw -benchtime 200000x ./bridge/
func BenchmarkProduceRaw(b *testing.B) {
	const conns, window = 4, 256
	br := startBridge(b, testConfig(os.Getenv("FERRY_TEST_KAFKA")))
	clients := make([]*lightClient, conns)
	frames := make([][]byte, conns)
	for i := range clients {
		c, err := dialLight(&net.Dialer{Timeout: 5 * time.Second}, br.MQTTAddr(), fmt.Sprintf("raw-%d-%s", i, randHex(3)), 4, 60)
		if err != nil {
			b.Fatal(err)
		}
		defer c.close()
		clients[i] = c
		topic := uniqueTopic(fmt.Sprintf("raw%d", i))
		// Warm up: create the Kafka topic outside the timing.
		c.send(b, 4, publishPacket(topic, 1, 1, "warm-up-12b!"))
		if pk, _ := c.next(b, 4, 30*time.Second); pk.FixedHeader.Type != packets.Puback {
			b.Fatalf("warm-up: type %d", pk.FixedHeader.Type)
		}
		var buf bytes.Buffer
		for id := range window {
			pk := publishPacket(topic, 1, uint16(id+1), "payload-12b!")
			pk.ProtocolVersion = 4
			if err := pk.PublishEncode(&buf); err != nil {
				b.Fatal(err)
			}
		}
		frames[i] = buf.Bytes()
	}
	per := max(b.N/conns, 1)
	rounds := (per + window - 1) / window
	b.ResetTimer()
	start, cpu0 := time.Now(), processCPU(b)
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.conn.SetDeadline(time.Now().Add(5 * time.Minute))
			for range rounds {
				if _, err := c.conn.Write(frames[i]); err != nil {
					errs <- err
					return
				}
				for range window {
					typ, _, err := c.read()
					if err != nil || typ>>4 != packets.Puback {
						errs <- fmt.Errorf("type %#x: %v", typ, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	n := float64(rounds * window * conns)
	b.ReportMetric(n/time.Since(start).Seconds(), "msgs/s")
	// CPU per message (bridge and generator: one process) is steadier than
	// throughput on a shared machine.
	b.ReportMetric(float64(processCPU(b)-cpu0)/n, "cpu-ns/msg")
}

// processCPU is this process's user+system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
