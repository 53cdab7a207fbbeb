// Command benchkit is the bench-only toolbox of scripts/bench.sh: it creates
// the benchmark's Kafka topics, receives the records kafka-producer-perf-test
// produced after the bridge published them on MQTT (reference test 2),
// converts kafka-producer-perf-test's summary line into the probe's CSV
// columns, and writes the markdown summary with the ratios of one run; kafkacost
// measures what each record shape (key, headers, compression, batching) costs
// Kafka per message, through Ferry's own producer.
//
//	benchkit topics  --kafka 127.0.0.1:9092 T1 T2 ...
//	benchkit recv    --mqtt tcp://127.0.0.1:1883 --topic /a/b --kafka-topic _a_b --count N --csv out.csv
//	benchkit perfcsv --qos -1 --payload-bytes 12 --rate -1 < perf-test.log > out.csv
//	benchkit summary --csv results.csv --env env.txt > summary.md
//	benchkit puback  --mqtt tcp://127.0.0.1:1883 --count 100000 --rate 1000 --clients 1
//	benchkit matrix  --csv matrix.csv --env env.txt > matrix.md
//	benchkit kafkacost --kafka 127.0.0.1:9092 --count 1000000 --rounds 3
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// errUsage marks bad command lines.
var errUsage = errors.New("usage")

const usage = `usage: benchkit topics|recv|perfcsv|summary|puback|matrix|kafkacost [flags]`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchkit:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return fmt.Errorf("%w: no command", errUsage)
	}
	switch args[0] {
	case "topics":
		return runTopics(ctx, args[1:], stderr)
	case "recv":
		return runRecv(ctx, args[1:], stdout, stderr)
	case "perfcsv":
		return runPerfCSV(args[1:], stdin, stdout, stderr)
	case "summary":
		return runSummary(args[1:], stdout, stderr)
	case "puback":
		return runPuback(ctx, args[1:], stdout, stderr)
	case "matrix":
		return runMatrix(args[1:], stdout, stderr)
	case "kafkacost":
		return runKafkaCost(ctx, args[1:], stdout, stderr)
	default:
		fmt.Fprintln(stderr, usage)
		return fmt.Errorf("%w: unknown command %q", errUsage, args[0])
	}
}
