package kafkatest

import (
	"bytes"
	"fmt"
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
	state  string
	nodes  int // 0: one broker; else a cluster of that many (StartCluster)
	env    []string
}

// StartBroker starts a dedicated single-node broker and stops it when the
// test ends. It takes 5-30 s (none when a spare is ready: StartSpares):
// use it only for fault tests.
func StartBroker(tb testing.TB) *Broker {
	tb.Helper()
	if b := takeSpare(tb); b != nil {
		return b
	}
	b := NewBroker(tb, "")
	b.Addr = b.Up()
	return b
}

// NewBroker prepares a dedicated broker on port (a free one when empty)
// without starting it: Up starts it. It is stopped when the test ends.
func NewBroker(tb testing.TB, port string) *Broker {
	tb.Helper()
	b, err := newBroker(port)
	if err != nil {
		tb.Fatalf("kafkatest: %v", err)
	}
	b.own(tb)
	return b
}

// StartCluster starts a dedicated KRaft cluster of nodes brokers
// (KAFKA_NODES: replication factor 3, min.insync.replicas 2) and stops it
// when the test ends; Addr is the bootstrap list and Run("kill", "2")
// reaches one node. 30-60 s here, none when a spare is ready.
func StartCluster(tb testing.TB, nodes int) *Broker {
	tb.Helper()
	if b := takeSpareCluster(tb, nodes); b != nil {
		return b
	}
	b, err := newCluster(nodes)
	if err != nil {
		tb.Fatalf("kafkatest: %v", err)
	}
	b.own(tb)
	b.Addr = b.Up()
	return b
}

func newCluster(nodes int) (*Broker, error) {
	b, err := newBroker("")
	if err != nil {
		return nil, err
	}
	b.nodes = nodes
	b.env = append(b.env, fmt.Sprintf("KAFKA_NODES=%d", nodes), "KAFKA_READY_TIMEOUT=180")
	return b, nil
}

// Run runs scripts/kafka.sh with args for b (e.g. "kill", "2").
func (b *Broker) Run(args ...string) string {
	b.tb.Helper()
	out, err := b.exec(args...)
	if err != nil {
		b.tb.Fatal(err)
	}
	return out
}

// newBroker prepares a broker in a state directory of its own.
func newBroker(port string) (*Broker, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	state, err := os.MkdirTemp("", "ferry-kafka-state-")
	if err != nil {
		return nil, err
	}
	b := &Broker{state: state, script: filepath.Join(root, "scripts", "kafka.sh"),
		env: append(os.Environ(), "KAFKA_STATE_DIR="+state, "KAFKA_HEAP=256m", "KAFKA_READY_TIMEOUT=120")}
	if port != "" {
		b.env = append(b.env, "KAFKA_PORT="+port)
	}
	return b, nil
}

// own makes b tb's: stopped, and its state removed, when the test ends.
func (b *Broker) own(tb testing.TB) {
	b.tb = tb
	tb.Cleanup(func() {
		if err := b.stop(); err != nil {
			tb.Logf("kafkatest: %v", err)
		}
		if tb.Failed() {
			tb.Logf("dedicated broker logs kept in %s (broker.log, node*/broker.log)", b.state)
			return
		}
		os.RemoveAll(b.state)
	})
}

// stop kills the broker: its data goes anyway, and a graceful stop takes
// seconds.
func (b *Broker) stop() error {
	_, err := b.execEnv([]string{"KAFKA_STOP_TIMEOUT=0"}, "down")
	return err
}

// Up starts the broker (again after Kill, with its data) and returns its address.
func (b *Broker) Up() string {
	b.tb.Helper()
	start := time.Now()
	addr := lastLine(b.run("up"))
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
	out, err := b.exec(cmd)
	if err != nil {
		b.tb.Fatal(err)
	}
	return out
}

// exec runs scripts/kafka.sh args for b.
func (b *Broker) exec(args ...string) (string, error) {
	return b.execEnv(nil, args...)
}

// execEnv runs scripts/kafka.sh args for b, with extra environment.
func (b *Broker) execEnv(env []string, args ...string) (string, error) {
	c := exec.Command("bash", append([]string{b.script}, args...)...)
	c.Env = append(append([]string(nil), b.env...), env...)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		return "", fmt.Errorf("scripts/kafka.sh %s: %w\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// lastLine is the address kafka.sh up prints last.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
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
