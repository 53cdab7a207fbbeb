// Command probe measures a Ferry bridge like the reference latency test, in
// one command. The logic lives in package probe; this is only flag parsing
// and output files.
//
//	probe mqtt-to-kafka --mqtt tcp://127.0.0.1:1883 --kafka 127.0.0.1:9092 \
//	    --topic /tacos/pub/lf --count 1000000 --qos 1 --payload-size 12 --csv out.csv
//	probe kafka-to-mqtt --topic /tacos/sub/le --count 200000 --rate 1000 --payload-file data.txt
//	probe roundtrip --mqtt tcp://a:1883 --reply-mqtt tcp://b:1883 --topic /tacos/pub/lf --rate 1000
//	probe roundtrip --mqtt tcp://a:1883 --reply-mqtt tcp://b:1883 --kafka k:9092 --rate 1000   # + append, delivery
//	probe sweep --direction mqtt-to-kafka --clients 1,30,60 --interval 5s --payload 12,120 \
//	    --duration 120s --repeat 3 --csv sweep.csv --plot figs
//	probe compare a.csv b.csv
//	probe kafka-to-mqtt --subscribers 10000 --ramp 1000 --qos 1 --rate 2 --count 60
//	probe mqtt-to-kafka --link satellite --rate 10 --count 300 --plot figs
//	probe mqtt-to-kafka --qos 1 --clients 4 --inflight 256 --count 2000000
//	probe mqtt-to-kafka --mqtt tcp://127.0.0.1:1884 --ack-only --clients 4 --inflight 256
//
// Publishers use the probe's raw MQTT 3.1.1 engine by default (--client
// paho for eclipse/paho.mqtt.golang): --inflight N keeps N QoS 1/2
// publishes in flight per client (1, the default, is the reference test's
// closed loop).
//
// Sweep: each of --clients publishers sends one message per --interval for
// --duration, per payload size, --repeat times averaged. The knee of a
// payload size is the last point before the received throughput gained per
// added client falls below half of what an added client offers
// (1/interval msg/s): past it, clients add queueing and loss, not
// throughput.
//
// --link puts the probe's MQTT clients in a private network namespace
// behind a user-space packet forwarder (package probe/link) applying
// delay, jitter, loss and a rate limit, so the kernel's TCP sees real loss
// and RTT. Needs root and /dev/net/tun; everything is removed on exit,
// Ctrl-C and kill -9 included.
//
// Exit status: 0 ok, 1 error (a broker unreachable, sends failed), 2 bad
// usage, 3 a QoS >= 1 run lost messages (the figures are still printed).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/ferry-bridge/ferry/probe"
	"github.com/ferry-bridge/ferry/probe/charts"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // unreachable broker, failed sends, files
	exitUsage = 2 // bad flags or config
	exitLost  = 3 // a QoS >= 1 run lost messages
)

// errUsage marks command-line mistakes.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, pflag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "probe:", err)
	}
	os.Exit(exitCode(err))
}

func exitCode(err error) int {
	switch {
	case err == nil, errors.Is(err, pflag.ErrHelp):
		return exitOK
	case errors.Is(err, errUsage), errors.Is(err, probe.ErrConfig):
		return exitUsage
	case errors.Is(err, probe.ErrLost):
		return exitLost
	default:
		return exitError
	}
}

const usage = `probe measures Ferry's latency and delivery, both ways.

Usage:
  probe mqtt-to-kafka [flags]   publish on MQTT, consume the mapped Kafka topic
  probe kafka-to-mqtt [flags]   produce to Kafka, subscribe on MQTT
  probe roundtrip [flags]       publish on MQTT, subscribe where the bridge routes it back
  probe sweep [flags]           a grid of runs (clients x payload sizes), with the knee
  probe compare A.csv B.csv     ratios B/A of every figure of two probe CSVs
  probe <command> --help        flags of a command

Exit status: 0 ok, 1 error (broker unreachable, send failed), 2 bad usage,
3 a QoS >= 1 run lost messages.
`

// run parses args (without the program name) and runs one probe command.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("%w: no command", errUsage)
	}
	var d probe.Direction
	switch args[0] {
	case "mqtt-to-kafka", "kafka-to-mqtt", "roundtrip":
		d = probe.Direction(args[0])
	case "sweep":
		return runSweep(ctx, args[1:], stdout, stderr)
	case "compare":
		return runCompare(args[1:], stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("%w: unknown command %q", errUsage, args[0])
	}
	cfg, files, err := parseFlags(d, args[1:], stderr)
	if err != nil {
		return err
	}
	env := probe.Env{Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if isTerminal(stdout) {
		env.Progress = stdout
	}
	res, runErr := probe.Run(ctx, d, cfg, env)
	if res == nil {
		return runErr
	}
	if err := probe.WriteTable(stdout, res); err != nil {
		return errors.Join(runErr, err)
	}
	if files.csv != "" {
		if err := writeFile(files.csv, func(w io.Writer) error { return probe.WriteCSV(w, res.Rows) }); err != nil {
			return errors.Join(runErr, err)
		}
	}
	if files.raw != "" {
		if err := writeFile(files.raw, func(w io.Writer) error { return probe.WriteRaw(w, res.Raw()) }); err != nil {
			return errors.Join(runErr, err)
		}
	}
	if files.plot != "" {
		paths, err := charts.WriteRun(files.plot, res)
		if err != nil {
			return errors.Join(runErr, err)
		}
		fmt.Fprintf(stdout, "plots: %s\n", strings.Join(paths, " "))
	}
	return runErr
}

type outFiles struct{ csv, raw, plot string }

func parseFlags(d probe.Direction, args []string, stderr io.Writer) (probe.Config, outFiles, error) {
	cfg := probe.DefaultConfig(d)
	var files outFiles
	fs := pflag.NewFlagSet("probe "+string(d), pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	addRunFlags(fs, d, &cfg, &files, false)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return cfg, files, err
		}
		return cfg, files, fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return cfg, files, fmt.Errorf("%w: unexpected arguments %s", errUsage, strings.Join(fs.Args(), " "))
	}
	if cfg.PayloadFile != "" && !fs.Changed("payload-size") {
		cfg.PayloadSize = 0 // 12 + file size
	}
	cfg.Raw = files.raw != ""
	// roundtrip consumes Kafka only when asked: --kafka splits the trip at
	// each record's LogAppendTime (metrics append and delivery).
	cfg.SplitAtKafka = d == probe.Roundtrip && fs.Changed("kafka")
	return cfg, files, cfg.Validate(d)
}

// addRunFlags registers the flags of a run of direction d on fs. A sweep
// sets the count, rate, clients and payload itself.
func addRunFlags(fs *pflag.FlagSet, d probe.Direction, cfg *probe.Config, files *outFiles, sweep bool) {
	fs.StringVar(&cfg.MQTT, "mqtt", cfg.MQTT, "MQTT broker URL (tcp://host:port)")
	kafkaHelp := "Kafka bootstrap brokers, comma-separated"
	if d == probe.Roundtrip && !sweep {
		kafkaHelp += "; giving it also consumes the Kafka topic the bridge writes and splits the trip at each record's LogAppendTime (metrics append and delivery)"
	}
	fs.StringSliceVar(&cfg.Kafka, "kafka", cfg.Kafka, kafkaHelp)
	fs.StringVar(&cfg.Topic, "topic", cfg.Topic, "MQTT topic")
	if d != probe.Roundtrip {
		fs.StringVar(&cfg.KafkaTopic, "kafka-topic", "", "Kafka topic (default: the bridge's default mapping of --topic, e.g. /tacos/pub/lf -> _tacos_pub_lf)")
	} else if !sweep {
		fs.StringVar(&cfg.KafkaTopic, "kafka-topic", "", "with --kafka: the Kafka topic the bridge writes --topic to (default: its default mapping, e.g. /tacos/pub/lf -> _tacos_pub_lf)")
	}
	if d == probe.Roundtrip {
		fs.StringVar(&cfg.ReplyMQTT, "reply-mqtt", "", "MQTT broker URL of the subscribers (default --mqtt; another bridge instance sharing the Kafka cluster)")
		fs.StringVar(&cfg.ReplyTopic, "reply-topic", "", "MQTT topic the bridge publishes the messages back on (default --topic, needs --reply-mqtt)")
		fs.BoolVar(&cfg.Local, "local", false, "subscribers on --topic of the publishers' own broker: time that broker's own delivery (one Ferry instance, or any MQTT broker's fan-out)")
	}
	if !sweep {
		fs.IntVar(&cfg.Count, "count", cfg.Count, "measured messages")
	}
	fs.IntVar(&cfg.Warmup, "warmup", cfg.Warmup, "warm-up messages sent first, excluded from the figures")
	fs.IntVar(&cfg.QoS, "qos", cfg.QoS, "MQTT QoS of publishes and subscriptions (0, 1, 2)")
	if !sweep {
		fs.IntVar(&cfg.PayloadSize, "payload-size", cfg.PayloadSize, "payload bytes, at least 12 (the stamp); with --payload-file default 12 + file size")
		fs.StringVar(&cfg.PayloadFile, "payload-file", "", "fill the payload after the 12-byte stamp with this file's content (repeated or truncated to --payload-size)")
		fs.Float64Var(&cfg.Rate, "rate", 0, "total messages/s, open loop with latency from the intended send time; 0 = closed loop (wait for each ack)")
		fs.IntVar(&cfg.Clients, "clients", cfg.Clients, "MQTT publishers (Kafka producer goroutines for kafka-to-mqtt)")
	}
	if d != probe.MQTTToKafka {
		fs.IntVar(&cfg.Subscribers, "subscribers", cfg.Subscribers, "MQTT subscribers, each receiving every message")
		fs.Float64Var(&cfg.Ramp, "ramp", 0, "subscriber connections per second (0 = all at once); raise ulimit -n for thousands")
	}
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "how long to wait for stragglers after the last send")
	fs.DurationVar(&cfg.ConnectTimeout, "connect-timeout", cfg.ConnectTimeout, "bound on connecting to MQTT and Kafka")
	fs.StringVar(&cfg.Link, "link", "", "put the probe's MQTT clients behind an emulated link: satellite, wifi, lan or custom:delay=270ms,jitter=10ms,loss=0.5%,rate=2mbit (needs root and /dev/net/tun)")
	fs.StringVar(&cfg.Username, "username", "", "MQTT username")
	fs.StringVar(&cfg.Password, "password", "", "MQTT password")
	if d == probe.KafkaToMQTT {
		fs.BoolVar(&cfg.NoCreateTopic, "no-create-topic", false, "fail if the Kafka topic is missing instead of creating it (1 partition, LogAppendTime, as the bridge does)")
		fs.Bool("create-topic", true, "creating a missing topic is the default now")
		_ = fs.MarkDeprecated("create-topic", "a missing topic is created by default (--no-create-topic to refuse)")
	}
	if d != probe.KafkaToMQTT {
		fs.StringVar(&cfg.Client, "client", cfg.Client, "MQTT publisher: raw (the probe's own engine: pre-encoded packets, buffered writes, --inflight window) or paho")
		fs.IntVar(&cfg.Inflight, "inflight", 0, "QoS 1/2 publishes in flight per client (default 1, the reference's closed loop; 16384 with --rate)")
	}
	if d == probe.MQTTToKafka && !sweep {
		fs.IntVar(&cfg.Topics, "topics", cfg.Topics, "spread the publishes over N topics --topic/0 .. --topic/N-1 (Kafka: the mapping of each, or --kafka-topic_0 ..)")
		fs.BoolVar(&cfg.AckOnly, "ack-only", false, "no Kafka: measure publish -> acknowledgement only (an MQTT broker alone, e.g. Mosquitto as the MQTT ceiling); metric ack")
	}
	if sweep {
		fs.StringVar(&files.csv, "csv", "", "write the sweep as CSV (header + one row per point)")
	} else {
		fs.StringVar(&files.csv, "csv", "", "write the figures as CSV (header + one row per direction and metric)")
		fs.StringVar(&files.raw, "raw", "", "write one line per message: seq,send_ns,recv_ns,log_append_time_ms,append_ms,e2e_ms (docs/probe.md)")
	}
	fs.StringVar(&files.plot, "plot", "", "write PNG figures into this directory")
}

// runSweep parses and runs "probe sweep".
func runSweep(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	d := probe.MQTTToKafka
	for i, a := range args { // the direction decides which flags exist
		if v, ok := strings.CutPrefix(a, "--direction="); ok {
			d = probe.Direction(v)
		} else if a == "--direction" && i+1 < len(args) {
			d = probe.Direction(args[i+1])
		}
	}
	switch d {
	case probe.MQTTToKafka, probe.KafkaToMQTT, probe.Roundtrip:
	default:
		return fmt.Errorf("%w: --direction %q: want mqtt-to-kafka, kafka-to-mqtt or roundtrip", errUsage, d)
	}
	sc := probe.SweepConfig{Direction: d, Base: probe.DefaultConfig(d)}
	var files outFiles
	var direction, clients, payloads string
	fs := pflag.NewFlagSet("probe sweep", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	fs.StringVar(&direction, "direction", string(probe.MQTTToKafka), "direction measured at every point")
	fs.StringVar(&clients, "clients", "1,30,60", "publisher counts, ascending, comma-separated")
	fs.StringVar(&payloads, "payload", "12,120", "payload sizes in bytes, comma-separated (each >= 12)")
	fs.DurationVar(&sc.Interval, "interval", 5*time.Second, "each publisher sends one message per interval (e.g. 5s; 2ms for the high-rate variant)")
	fs.DurationVar(&sc.Duration, "duration", 120*time.Second, "send time of each run")
	fs.IntVar(&sc.Repeat, "repeat", 1, "runs per point, averaged")
	addRunFlags(fs, d, &sc.Base, &files, true)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %s", errUsage, strings.Join(fs.Args(), " "))
	}
	var err error
	if sc.Clients, err = probe.ParseInts(clients); err != nil {
		return fmt.Errorf("--clients: %w", err)
	}
	if sc.Payloads, err = probe.ParseInts(payloads); err != nil {
		return fmt.Errorf("--payload: %w", err)
	}
	if err := sc.Validate(); err != nil {
		return err
	}
	env := probe.Env{Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	onPoint := func(p probe.SweepPoint) {
		fmt.Fprintf(stderr, "point %d B x %d clients: %.1f msg/s received, avg %.3f ms, p99 %.3f ms, loss %.3f%%\n",
			p.PayloadBytes, p.Clients, p.ThroughputMsgS, p.AvgMs, p.P99Ms, p.LossPct)
	}
	res, err := probe.Sweep(ctx, sc, env, onPoint)
	if res == nil || len(res.Points) == 0 {
		return err
	}
	if res.Knees == nil {
		res.Knees = probe.FindKnees(res.Points)
	}
	if werr := probe.WriteSweepTable(stdout, res); werr != nil {
		return errors.Join(err, werr)
	}
	if files.csv != "" {
		if werr := writeFile(files.csv, func(w io.Writer) error { return probe.WriteSweepCSV(w, res.Points) }); werr != nil {
			return errors.Join(err, werr)
		}
	}
	if files.plot != "" {
		paths, perr := charts.WriteSweep(files.plot, res)
		if perr != nil {
			return errors.Join(err, perr)
		}
		fmt.Fprintf(stdout, "plots: %s\n", strings.Join(paths, " "))
	}
	return err
}

// runCompare parses and runs "probe compare A.csv B.csv".
func runCompare(args []string, stdout io.Writer) error {
	if len(args) == 1 && (args[0] == "--help" || args[0] == "-h") {
		fmt.Fprint(stdout, "usage: probe compare A.csv B.csv   (two run CSVs or two sweep CSVs; prints B/A per figure)\n")
		return nil
	}
	if len(args) != 2 {
		return fmt.Errorf("%w: compare wants two CSV files, got %d arguments", errUsage, len(args))
	}
	fa, err := os.Open(args[0])
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	defer fa.Close()
	fb, err := os.Open(args[1])
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	defer fb.Close()
	res, err := probe.Compare(fa, fb)
	if err != nil {
		return err
	}
	return probe.WriteComparison(stdout, res, args[0], args[1])
}

// writeFile writes path, creating its directory if needed (the README's
// examples write into results/, which a fresh clone does not have).
func writeFile(path string, write func(io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	return nil
}

// isTerminal reports whether w is a character device (a terminal): the
// progress line is written only there.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
