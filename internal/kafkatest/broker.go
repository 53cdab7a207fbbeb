package kafkatest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Broker is a Kafka broker of one test's own, started with scripts/kafka.sh
// in a state directory of its own, for tests that stop, kill or pause Kafka
// without disturbing the shared broker other tests use.
type Broker struct {
	tb     testing.TB
	Addr   string
	script string
	env    []string
}

// StartBroker starts a dedicated single-node broker and stops it when the
// test ends. It takes 5-30 s: use it only for fault tests.
func StartBroker(tb testing.TB) *Broker {
	tb.Helper()
	b := NewBroker(tb, "")
	b.Addr = b.Up()
	return b
}

// NewBroker prepares a dedicated broker on port (a free one when empty)
// without starting it: Up starts it. It is stopped when the test ends.
func NewBroker(tb testing.TB, port string) *Broker {
	tb.Helper()
	root, err := repoRoot()
	if err != nil {
		tb.Fatalf("kafkatest: %v", err)
	}
	state, err := os.MkdirTemp("", "ferry-kafka-state-")
	if err != nil {
		tb.Fatalf("kafkatest: %v", err)
	}
	b := &Broker{tb: tb, script: filepath.Join(root, "scripts", "kafka.sh"),
		env: append(os.Environ(), "KAFKA_STATE_DIR="+state, "KAFKA_HEAP=256m", "KAFKA_READY_TIMEOUT=120")}
	if port != "" {
		b.env = append(b.env, "KAFKA_PORT="+port)
	}
	tb.Cleanup(func() {
		// Killed, not stopped: its data goes anyway, and a graceful stop
		// takes seconds.
		b.env = append(b.env, "KAFKA_STOP_TIMEOUT=0")
		b.run("down")
		if tb.Failed() {
			tb.Logf("dedicated broker log kept at %s/broker.log", state)
			return
		}
		os.RemoveAll(state)
	})
	return b
}

// Up starts the broker (again after Kill, with its data) and returns its address.
func (b *Broker) Up() string {
	b.tb.Helper()
	start := time.Now()
	out := b.run("up")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	addr := strings.TrimSpace(lines[len(lines)-1])
	b.tb.Logf("dedicated kafka up at %s in %s", addr, time.Since(start).Round(100*time.Millisecond))
	return addr
}

// Kill crashes the broker (SIGKILL); Up restarts it with its data.
func (b *Broker) Kill() { b.tb.Helper(); b.run("kill") }

// Pause freezes the broker (SIGSTOP); Resume thaws it.
func (b *Broker) Pause() { b.tb.Helper(); b.run("pause") }

// Resume continues a paused broker (SIGCONT).
func (b *Broker) Resume() { b.tb.Helper(); b.run("resume") }

func (b *Broker) run(cmd string) string {
	b.tb.Helper()
	c := exec.Command("bash", b.script, cmd)
	c.Env = b.env
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		b.tb.Fatalf("scripts/kafka.sh %s: %v\n%s%s", cmd, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}
