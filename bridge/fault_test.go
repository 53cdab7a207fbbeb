package bridge

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
	"github.com/ferry-bridge/ferry/internal/testhelp"
)

// ackLedger records, per client, which sequence numbers the bridge acked.
type ackLedger struct {
	mu    sync.Mutex
	acked map[string][]bool
}

func newLedger() *ackLedger { return &ackLedger{acked: make(map[string][]bool)} }

// resilientPublisher publishes seq 0..total-1 as QoS 1 on topic, window by
// window, like a device: when the connection drops it reconnects and resends
// every message that was not acknowledged. It records what was acked.
func resilientPublisher(ctx context.Context, t testing.TB, addr func() string, id, topic string, total, window int, ledger *ackLedger, reconnects *atomic.Int64) error {
	acked := make([]bool, total)
	defer func() {
		ledger.mu.Lock()
		ledger.acked[topic] = acked
		ledger.mu.Unlock()
	}()
	next := 0
	for attempt := 0; next < total; attempt++ {
		if ctx.Err() != nil {
			return fmt.Errorf("%s: gave up with %d of %d acked: %w", id, countTrue(acked), total, ctx.Err())
		}
		if attempt > 0 {
			reconnects.Add(1)
			time.Sleep(100 * time.Millisecond) // reconnect backoff, as a device would
		}
		o := paho.NewClientOptions().AddBroker("tcp://" + addr()).SetClientID(id).
			SetAutoReconnect(false).SetConnectRetry(false).SetCleanSession(true).
			SetConnectTimeout(3 * time.Second).SetWriteTimeout(5 * time.Second).SetOrderMatters(false)
		c := paho.NewClient(o)
		if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			continue
		}
		for next < total && c.IsConnectionOpen() {
			end := min(next+window, total)
			var seqs []int
			var toks []paho.Token
			for s := next; s < end; s++ {
				if !acked[s] {
					seqs = append(seqs, s)
					toks = append(toks, c.Publish(topic, 1, false, strconv.Itoa(s)))
				}
			}
			failed := false
			for i, tok := range toks {
				if tok.WaitTimeout(15*time.Second) && tok.Error() == nil {
					acked[seqs[i]] = true
				} else {
					failed = true
				}
			}
			for next < total && acked[next] {
				next++
			}
			if failed {
				break
			}
		}
		c.Disconnect(50)
	}
	return nil
}

// fleet is a set of resilient publishers running in the background, one
// per topic, sharing a ledger of what the bridge acknowledged.
type fleet struct {
	ledger     *ackLedger
	reconnects atomic.Int64
	wg         sync.WaitGroup
	errs       chan error
	cancel     context.CancelFunc
}

// startFleet starts one resilientPublisher per topic (client ids
// idPrefix-N), each sending perClient messages in windows of window.
func startFleet(t testing.TB, addr func() string, idPrefix string, topics []string, perClient, window int, timeout time.Duration) *fleet {
	f := &fleet{ledger: newLedger(), errs: make(chan error, len(topics))}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	f.cancel = cancel
	for i, topic := range topics {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			if err := resilientPublisher(ctx, t, addr, fmt.Sprintf("%s-%d", idPrefix, i), topic, perClient, window, f.ledger, &f.reconnects); err != nil {
				f.errs <- err
			}
		}()
	}
	return f
}

// wait waits for every publisher and fails the test if one gave up.
func (f *fleet) wait(t testing.TB) {
	t.Helper()
	f.wg.Wait()
	f.cancel()
	close(f.errs)
	for err := range f.errs {
		t.Fatal(err)
	}
}

// topicsFor returns n fresh MQTT topics.
func topicsFor(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = uniqueTopic(fmt.Sprintf("%s%d", prefix, i))
	}
	return out
}

func countTrue(b []bool) int {
	n := 0
	for _, v := range b {
		if v {
			n++
		}
	}
	return n
}

// verifyAcked asserts that every acked message is in Kafka and returns the
// number of records and duplicates found.
func verifyAcked(t *testing.T, brokers string, ledger *ackLedger) (acked, records, dups int) {
	t.Helper()
	for topic, ok := range ledger.acked {
		ktopic := kafkaName(t, topic)
		n := int(kafkatest.RecordCount(t, brokers, ktopic))
		msgs := kafkatest.ConsumeAll(t, brokers, ktopic, n, 60*time.Second)
		seen := make(map[int]int)
		for _, m := range msgs {
			s, err := strconv.Atoi(string(m.Value))
			if err != nil {
				t.Fatalf("%s: foreign record %q", ktopic, m.Value)
			}
			seen[s]++
		}
		for s, a := range ok {
			if a {
				acked++
				if seen[s] == 0 {
					t.Errorf("%s: message %d was acknowledged but is not in Kafka", topic, s)
				}
			}
		}
		for _, c := range seen {
			dups += c - 1
		}
		records += len(msgs)
	}
	return acked, records, dups
}

func freeAddr(t testing.TB) string { return testhelp.FreeAddr(t) }

// childReady bounds the start of a bridge process (childBridge,
// startFerry) until it is ready: a cold start under -race at the start of a
// full run, beside spare Kafka JVMs starting, once took more than 30 s.
const childReady = 90 * time.Second

// childBridge runs this test binary as a bridge process.
type childBridge struct {
	t    *testing.T
	env  []string
	cmd  *exec.Cmd
	addr string // MQTT address, once started
	http string // HTTP address (metrics), unless env names FERRY_HTTP_LISTEN
}

func (c *childBridge) start() {
	c.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// The child loads its config from the environment: only its own FERRY_*
	// settings and the harness's FERRY_TEST* (a shell's FERRY_SOAK_RATE would
	// be refused as no config key).
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FERRY_") || strings.HasPrefix(kv, "FERRY_TEST") {
			env = append(env, kv)
		}
	}
	// A free HTTP port unless c.env names one: an empty FERRY_HTTP_LISTEN
	// is the default 127.0.0.1:8080, which cmd/probe's README runs (beside
	// the bridge shards) and other processes use.
	c.http = freeAddr(c.t)
	env = append(append(env, stateEnv(c.t)...), "FERRY_HTTP_LISTEN="+c.http)
	cmd.Env = append(env, c.env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.cmd = cmd
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "ready "); ok {
				c.addr = a
				close(ready)
			}
		}
		io.Copy(io.Discard, out)
	}()
	select {
	case <-ready:
	case <-time.After(childReady):
		c.t.Fatalf("child bridge not ready in %s", childReady)
	}
}

// metricLine returns the child's /metrics line for series (name and
// labels exactly as exposed, e.g. `ferry_sessions{state="offline"}`), or ""
// (not exposed yet, or no HTTP listener of its own).
func (c *childBridge) metricLine(series string) string {
	res, err := http.Get("http://" + c.http + "/metrics")
	if err != nil {
		return ""
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			return v
		}
	}
	return ""
}

func (c *childBridge) kill9() {
	c.cmd.Process.Signal(syscall.SIGKILL)
	c.cmd.Wait()
}

func (c *childBridge) stop() {
	c.cmd.Process.Signal(syscall.SIGTERM)
	c.cmd.Wait()
}

// TestBridgeKill9LosesNothingAcked: the bridge process is killed with
// SIGKILL in the middle of a QoS 1 stream from 20 reconnecting clients and
// restarted; every message a client saw acknowledged must be in Kafka.
func TestBridgeKill9LosesNothingAcked(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	clients, perClient := 20, 10000
	if raceEnabled {
		perClient = 1000
	}
	mqttAddr := freeAddr(t)
	child := &childBridge{t: t, env: []string{childEnv + "=1",
		"FERRY_KAFKA_BROKERS=" + brokers, "FERRY_MQTT_LISTEN=" + mqttAddr,
		"FERRY_INSTANCE_ID=kill9-" + randHex(3), "FERRY_KAFKA_ACK_TIMEOUT=5s"}}
	child.start()
	defer child.stop()

	f := startFleet(t, func() string { return mqttAddr }, "kill9", topicsFor("kill9c", clients), perClient, 200, 5*time.Minute)
	// Kill once a good part of the stream went through.
	time.Sleep(2 * time.Second)
	child.kill9()
	t.Logf("bridge killed with SIGKILL; restarting")
	child.start()
	f.wait(t)
	acked, records, dups := verifyAcked(t, brokers, f.ledger)
	t.Logf("kill -9 of the bridge: %d clients x %d QoS1 msgs: acked %d, records in Kafka %d, duplicates %d, reconnects %d",
		clients, perClient, acked, records, dups, f.reconnects.Load())
	if acked != clients*perClient {
		t.Fatalf("acked %d, want %d: publishers gave up", acked, clients*perClient)
	}
}

// TestKafkaKilledMidStream: a dedicated broker is killed (SIGKILL) while
// QoS 1 clients publish, then restarted. Nothing unacknowledged is acked,
// nothing acked is lost, /readyz goes false (saying Kafka is the problem,
// while /healthz stays 200: the process is alive) then true, and the bridge
// resumes by itself.
func TestKafkaKilledMidStream(t *testing.T) {
	kb := kafkatest.StartBroker(t)
	cfg := testConfig(kb.Addr)
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.Kafka.AckTimeout = 3 * time.Second
	b := startBridge(t, cfg)
	ready := func() bool {
		res, err := http.Get("http://" + b.HTTPAddr() + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	}
	waitFor(t, 10*time.Second, "readyz true", ready)

	clients, perClient := 5, 4000
	if raceEnabled {
		perClient = 1000
	}
	f := startFleet(t, b.MQTTAddr, "kkill", topicsFor("kkill", clients), perClient, 100, 4*time.Minute)
	time.Sleep(time.Second)
	kb.Kill()
	waitFor(t, 15*time.Second, "readyz false after kafka was killed", func() bool { return !ready() })
	t.Logf("kafka killed; /readyz is false")
	if code, body := httpStatus(t, "http://"+b.HTTPAddr()+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "kafka") {
		t.Errorf("/readyz while Kafka is down: %d %q, want 503 saying Kafka is the problem", code, body)
	}
	if code, _ := httpStatus(t, "http://"+b.HTTPAddr()+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d while Kafka is down, want 200 (alive)", code)
	}
	kb.Up()
	waitFor(t, 30*time.Second, "readyz true after kafka restarted", ready)
	f.wait(t)
	acked, records, dups := verifyAcked(t, kb.Addr, f.ledger)
	t.Logf("kafka kill -9: %d clients x %d QoS1 msgs: acked %d, records %d, duplicates %d, reconnects %d",
		clients, perClient, acked, records, dups, f.reconnects.Load())
	if acked != clients*perClient {
		t.Fatalf("acked %d, want %d", acked, clients*perClient)
	}
}
