package bridge

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
)

// childEnv makes the test binary act as a bridge process (for kill -9 tests):
// configuration comes from FERRY_* variables, as for cmd/bridge.
const childEnv = "FERRY_TEST_BRIDGE_CHILD"

// childConfigEnv names an optional YAML config file for the child.
const childConfigEnv = "FERRY_TEST_BRIDGE_CHILD_CONFIG"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	flag.Parse()
	// The tests that stop, kill or pause a Kafka of their own: their brokers
	// start in the background now instead of at each test (5-30 s each).
	spares := kafkatest.StartSparesFor(
		[]string{"TestKafkaKilledMidStream", "TestGracefulShutdownDrains", "TestRingFullKafkaPaused"},
		clusterTests())
	code := m.Run()
	if err := spares.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

func runChild() int {
	fs := pflag.NewFlagSet("child", pflag.ContinueOnError)
	flags := BindFlags(fs)
	flags.ConfigFile = os.Getenv(childConfigEnv)
	cfg, err := LoadConfig(fs, flags, os.LookupEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child config:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	b, err := New(cfg, log, prometheus.NewRegistry())
	if err != nil {
		fmt.Fprintln(os.Stderr, "child new:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-b.Ready()
		fmt.Println("ready", b.MQTTAddr())
	}()
	if err := b.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "child run:", err)
		return 1
	}
	return 0
}
