// Command bridge runs Ferry: an MQTT broker whose publishes land in Kafka,
// and whose subscribers receive Kafka records. With no Kafka configured it
// starts an embedded in-memory Kafka (not for production).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/pflag"

	"github.com/ferry-bridge/ferry/bridge"
	"github.com/ferry-bridge/ferry/internal/idlegc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second signal now ends the process at once
	}()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, pflag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "bridge:", err)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("bridge", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	flags := bridge.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := bridge.LoadConfig(fs, flags, os.LookupEnv)
	if flags.CheckConfig {
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, "config ok")
		return nil
	}
	if err != nil {
		return err
	}
	log, err := newLogger(cfg.Log, stderr)
	if err != nil {
		return err
	}
	if prev, applied := applyRuntime(cfg.Runtime, os.LookupEnv); applied {
		log.Debug("garbage collector target set", "runtime.gc_percent", cfg.Runtime.GCPercent, "was", prev)
	}
	if cfg.Runtime.ReleaseIdleMemory {
		go func() { _ = idlegc.New(idlegc.DefaultConfig(), log).Run(ctx) }() // ends with ctx
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	b, err := bridge.New(cfg, log, reg)
	if err != nil {
		return err
	}
	return b.Run(ctx)
}

// applyRuntime sets the process's GC target from runtime.gc_percent unless
// GOGC is set in the environment (the operator's word wins). It reports
// the previous target and whether it changed anything.
func applyRuntime(rc bridge.RuntimeConfig, env func(string) (string, bool)) (prev int, applied bool) {
	if _, set := env("GOGC"); set {
		return 0, false
	}
	return debug.SetGCPercent(rc.GCPercent), true
}

func newLogger(cfg bridge.LogConfig, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.Level)); err != nil {
		return nil, fmt.Errorf("log.level=%s: %w", cfg.Level, err)
	}
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}
