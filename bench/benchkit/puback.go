package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/ferry-bridge/ferry/probe/stats"
)

// runPuback measures publish -> PUBACK: each client publishes QoS 1 messages
// open loop at its share of --rate (latency from the intended send time, so
// a stalled bridge is not hidden by coordinated omission), or as fast as it
// can with --rate 0 (then it reports the throughput; --qos 0 sends without
// acks). This is the number a device sees: with Ferry a PUBACK means Kafka
// has the record.
func runPuback(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("puback", flag.ContinueOnError)
	fs.SetOutput(stderr)
	broker := fs.String("mqtt", "tcp://127.0.0.1:1883", "MQTT broker URL")
	topic := fs.String("topic", "/bench/puback", "topic prefix (one topic per client: prefix/N)")
	count := fs.Int("count", 100000, "messages in all")
	rate := fs.Float64("rate", 1000, "total msg/s (0: as fast as possible)")
	clients := fs.Int("clients", 1, "MQTT clients")
	qos := fs.Int("qos", 1, "QoS (0 or 1)")
	size := fs.Int("payload-size", 12, "payload bytes")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if *clients < 1 || *count < *clients || *qos < 0 || *qos > 1 {
		return fmt.Errorf("%w: need clients >= 1, count >= clients, qos 0 or 1", errUsage)
	}
	per := *count / *clients
	hists := make([]*stats.Latency, *clients)
	var failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	errc := make(chan error, *clients)
	for i := range *clients {
		hists[i] = stats.NewLatency()
		o := paho.NewClientOptions().AddBroker(*broker).SetClientID(fmt.Sprintf("puback-%d-%d", i, start.UnixNano())).
			SetAutoReconnect(false).SetOrderMatters(false).SetWriteTimeout(10 * time.Second)
		c := paho.NewClient(o)
		if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			return fmt.Errorf("connect %s: %v", *broker, tok.Error())
		}
		defer c.Disconnect(100)
		wg.Add(1)
		go func() {
			defer wg.Done()
			payload := make([]byte, *size)
			t := fmt.Sprintf("%s/%d", *topic, i)
			type sent struct {
				tok  paho.Token
				want time.Time
			}
			pending := make(chan sent, 16384)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for s := range pending {
					if !s.tok.WaitTimeout(30*time.Second) || s.tok.Error() != nil {
						failed.Add(1)
						continue
					}
					hists[i].Record(int64(time.Since(s.want)))
				}
			}()
			interval := time.Duration(0)
			if *rate > 0 {
				interval = time.Duration(float64(time.Second) * float64(*clients) / *rate)
			}
			for n := range per {
				want := time.Now()
				if interval > 0 {
					want = start.Add(time.Duration(n) * interval)
					if d := time.Until(want); d > 0 {
						time.Sleep(d)
					}
				}
				copy(payload, strconv.Itoa(n))
				select {
				case pending <- sent{tok: c.Publish(t, byte(*qos), false, payload), want: want}:
				case <-ctx.Done():
					errc <- ctx.Err()
					close(pending)
					<-done
					return
				}
			}
			close(pending)
			<-done
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errc)
	for err := range errc {
		return err
	}
	all := stats.NewLatency()
	for _, h := range hists {
		all.Merge(h)
	}
	f := all.Figures()
	fmt.Fprintf(stdout, "puback: %d msgs, %d clients, QoS %d, %d B, rate %s: %.0f msg/s acked over %s, failed %d\n",
		per**clients, *clients, *qos, *size, rateLabel(*rate), float64(per**clients)/elapsed.Seconds(), elapsed.Round(time.Millisecond), failed.Load())
	fmt.Fprintf(stdout, "publish->puback ms: min %.3f avg %.3f p50 %.3f p90 %.3f p99 %.3f p99.9 %.3f max %.3f\n",
		f.Min, f.Avg, f.P50, f.P90, f.P99, f.P999, f.Max)
	if failed.Load() > 0 {
		return fmt.Errorf("%d publishes not acknowledged", failed.Load())
	}
	return nil
}

func rateLabel(r float64) string {
	if r <= 0 {
		return "max"
	}
	return strconv.FormatFloat(r, 'f', -1, 64) + "/s"
}
