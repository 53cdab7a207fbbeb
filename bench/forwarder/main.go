// Command forwarder is the "Mosquitto plus a small forwarder" that users
// compare Ferry with: a paho.mqtt.golang subscriber whose message handler
// writes each message to Kafka with a kafka-go Writer. It is written plainly,
// the way a user following the two libraries' READMEs would write it, and is
// used only by scripts/bench.sh.
//
//	forwarder --mqtt tcp://127.0.0.1:1884 --filter '#' --kafka 127.0.0.1:9092
//
// Choices (documented because they decide the figures):
//   - The Kafka topic is the MQTT topic with every '/' replaced by '_' (the
//     reference bridge's rule, Ferry's default), the key is the MQTT topic.
//   - --profile tuned (default): Writer{RequiredAcks: RequireAll,
//     BatchTimeout: 5ms, Balancer: Hash}; kafka-go's README warns that its
//     1 s default BatchTimeout makes synchronous writes slow, and acks=all
//     matches Ferry's safe default. The paho client runs handlers
//     concurrently (SetOrderMatters(false)), so concurrent synchronous
//     WriteMessages calls share batches; a handler returns (and paho sends
//     the PUBACK to Mosquitto) only after Kafka acknowledged the message,
//     which is at-least-once like Ferry.
//   - --profile readme: the Writer exactly as kafka-go's README shows it
//     (Addr, Balancer LeastBytes; defaults BatchTimeout 1 s, BatchSize 100,
//     RequiredAcks none) with the same concurrent handlers.
//
// The flags --batch-timeout, --batch-size, --acks, --async and
// --order-matters override a profile.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/segmentio/kafka-go"
)

// errUsage marks bad command-line flags.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "forwarder:", err)
		os.Exit(1)
	}
}

type options struct {
	mqtt, filter, clientID string
	qos                    int
	kafka                  string
	profile                string
	batchTimeout           time.Duration
	batchSize              int
	acks                   string
	async                  bool
	orderMatters           bool
	statsEvery             time.Duration
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("forwarder", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.mqtt, "mqtt", "tcp://127.0.0.1:1883", "MQTT broker URL")
	fs.StringVar(&o.filter, "filter", "#", "MQTT topic filter to forward")
	fs.StringVar(&o.clientID, "client-id", "ferry-bench-forwarder", "MQTT client id")
	fs.IntVar(&o.qos, "qos", 1, "subscription QoS")
	fs.StringVar(&o.kafka, "kafka", "127.0.0.1:9092", "Kafka bootstrap broker")
	fs.StringVar(&o.profile, "profile", "tuned", "writer settings: tuned (acks=all, 5ms batch timeout) or readme (kafka-go README defaults)")
	fs.DurationVar(&o.batchTimeout, "batch-timeout", 0, "override Writer.BatchTimeout")
	fs.IntVar(&o.batchSize, "batch-size", 0, "override Writer.BatchSize")
	fs.StringVar(&o.acks, "acks", "", "override Writer.RequiredAcks: all, one, none")
	fs.BoolVar(&o.async, "async", false, "Writer.Async (fire and forget)")
	fs.BoolVar(&o.orderMatters, "order-matters", false, "paho SetOrderMatters (true: one handler at a time)")
	fs.DurationVar(&o.statsEvery, "stats-every", 0, "log forwarded/failed counts at this interval (0: off)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.profile != "tuned" && o.profile != "readme" {
		return o, fmt.Errorf("%w: --profile %q: want tuned or readme", errUsage, o.profile)
	}
	switch o.acks {
	case "", "all", "one", "none":
	default:
		return o, fmt.Errorf("%w: --acks %q: want all, one or none", errUsage, o.acks)
	}
	return o, nil
}

// newWriter builds the kafka-go Writer of the chosen profile.
func newWriter(o options) *kafka.Writer {
	w := &kafka.Writer{Addr: kafka.TCP(o.kafka), Balancer: &kafka.LeastBytes{}}
	if o.profile == "tuned" {
		w.Balancer = &kafka.Hash{}
		w.RequiredAcks = kafka.RequireAll
		w.BatchTimeout = 5 * time.Millisecond
	}
	if o.batchTimeout > 0 {
		w.BatchTimeout = o.batchTimeout
	}
	if o.batchSize > 0 {
		w.BatchSize = o.batchSize
	}
	switch o.acks {
	case "all":
		w.RequiredAcks = kafka.RequireAll
	case "one":
		w.RequiredAcks = kafka.RequireOne
	case "none":
		w.RequiredAcks = kafka.RequireNone
	}
	w.Async = o.async
	return w
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	w := newWriter(o)
	defer w.Close()

	var forwarded, failed atomic.Int64
	handler := func(_ paho.Client, m paho.Message) {
		err := w.WriteMessages(ctx, kafka.Message{
			Topic: strings.ReplaceAll(m.Topic(), "/", "_"),
			Key:   []byte(m.Topic()),
			Value: m.Payload(),
		})
		if err != nil {
			if failed.Add(1) <= 10 {
				log.Error("kafka write", "topic", m.Topic(), "err", err)
			}
			return
		}
		forwarded.Add(1)
	}

	opts := paho.NewClientOptions().AddBroker(o.mqtt).SetClientID(o.clientID).
		SetCleanSession(true).SetOrderMatters(o.orderMatters).SetAutoReconnect(true).
		SetConnectTimeout(5 * time.Second).
		SetOnConnectHandler(func(c paho.Client) {
			// (Re)subscribe on every connect.
			tok := c.Subscribe(o.filter, byte(o.qos), handler)
			if tok.WaitTimeout(10*time.Second) && tok.Error() == nil {
				log.Info("subscribed", "filter", o.filter, "qos", o.qos)
			} else {
				log.Error("subscribe", "filter", o.filter, "err", tok.Error())
			}
		})
	c := paho.NewClient(opts)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		return fmt.Errorf("connect %s: %v", o.mqtt, tok.Error())
	}
	log.Info("forwarding", "mqtt", o.mqtt, "kafka", o.kafka, "profile", o.profile,
		"batch_timeout", w.BatchTimeout, "batch_size", w.BatchSize, "acks", int(w.RequiredAcks),
		"async", w.Async, "order_matters", o.orderMatters)

	var tick <-chan time.Time
	if o.statsEvery > 0 {
		t := time.NewTicker(o.statsEvery)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			c.Disconnect(250)
			log.Info("stopped", "forwarded", forwarded.Load(), "failed", failed.Load())
			return nil
		case <-tick:
			log.Info("stats", "forwarded", forwarded.Load(), "failed", failed.Load())
		}
	}
}
