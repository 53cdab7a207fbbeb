package bridge

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
)

// haproxy is one HAProxy process in TCP mode in front of backends.
type haproxy struct {
	addr   string
	cmd    *exec.Cmd
	stderr *lockedBuffer
	exited chan struct{}
}

// startHAProxy writes a TCP-mode configuration balancing over backends
// (round robin, health-checked every 200 ms, a failed connect redispatched
// to another server) and runs haproxy in the foreground.
func startHAProxy(t testing.TB, backends []string) *haproxy {
	t.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Fatalf("haproxy is not installed (scripts/test.sh installs the Debian package haproxy): %v", err)
	}
	h := &haproxy{addr: freeAddr(t), stderr: &lockedBuffer{}, exited: make(chan struct{})}
	var servers strings.Builder
	for i, b := range backends {
		fmt.Fprintf(&servers, "  server ferry%d %s check inter 200ms fall 1 rise 2\n", i, b)
	}
	cfg := fmt.Sprintf(`global
  maxconn 4000
defaults
  mode tcp
  timeout connect 1s
  timeout client 10m
  timeout server 10m
  retries 3
  option redispatch
frontend mqtt
  bind %s
  default_backend ferry
backend ferry
  balance roundrobin
%s`, h.addr, servers.String())
	path := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	h.cmd = exec.Command(bin, "-db", "-f", path)
	h.cmd.Stdout, h.cmd.Stderr = h.stderr, h.stderr
	if err := h.cmd.Start(); err != nil {
		t.Fatalf("haproxy: %v", err)
	}
	go func() {
		_ = h.cmd.Wait()
		close(h.exited)
	}()
	t.Cleanup(func() {
		_ = h.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-h.exited:
		case <-time.After(10 * time.Second):
			_ = h.cmd.Process.Kill()
			<-h.exited
		}
	})
	waitFor(t, 10*time.Second, "haproxy listening", func() bool {
		select {
		case <-h.exited:
			t.Fatalf("haproxy exited:\n%s", h.stderr.String())
		default:
		}
		c, err := net.DialTimeout("tcp", h.addr, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
	return h
}

// scaleOutFigures are the results of one load-balancer failover run.
type scaleOutFigures struct {
	publishers, perClient       int
	acked, inKafka, lost, dups  int
	onVictim                    int
	reconnect                   time.Duration
	reverseRecords, subscribers int
}

func (f scaleOutFigures) String() string {
	return fmt.Sprintf("%d publishers x %d QoS1 msgs through HAProxy, 1 of 3 instances killed (SIGKILL) with %d publishers on it: "+
		"acked %d, in Kafka %d (distinct acked), lost %d, duplicated %d, all publishers reconnected in %s; "+
		"reverse: %d records reached each of %d subscribers (one per instance) exactly once",
		f.publishers, f.perClient, f.onVictim, f.acked, f.inKafka, f.lost, f.dups, f.reconnect.Round(time.Millisecond),
		f.reverseRecords, f.subscribers)
}

// TestScaleOutHAProxy (issue 18, item 2): three cmd/bridge processes on one
// Kafka behind HAProxy in TCP mode. Reverse: a record produced to a reverse
// topic reaches a subscriber on every instance exactly once each (a sentinel
// produced last proves no duplicate is still on its way). Forward: QoS 1
// publishers connect through HAProxy; one instance is killed with SIGKILL
// mid-stream; the publishers reconnect through HAProxy to the others and
// resend what was not acknowledged. Every acknowledged message is in Kafka,
// and per publisher (one topic, one partition each) the first occurrences
// of its messages are in publish order. FERRY_SOAK_FULL=1 (scripts/soak.sh
// scaleout) runs the full size.
func TestScaleOutHAProxy(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	publishers, perClient, revN, budget := 30, 3000, 1000, 5*time.Minute
	if raceEnabled {
		perClient = 1500
	}
	if fullSize() {
		publishers, perClient, revN, budget = 300, 20000, 100000, 25*time.Minute
	}
	// FERRY_SCALEOUT_SIZE=publishers,per-publisher,reverse-records overrides
	// the size (e.g. to try scripts/soak.sh scaleout quickly).
	if v := os.Getenv("FERRY_SCALEOUT_SIZE"); v != "" {
		if _, err := fmt.Sscanf(v, "%d,%d,%d", &publishers, &perClient, &revN); err != nil || publishers < 3 || perClient < 100 || revN < 1 {
			t.Fatalf("FERRY_SCALEOUT_SIZE=%q: want publishers (>= 3),per-publisher (>= 100),reverse-records: %v", v, err)
		}
	}
	if lim := raiseNoFile(t, uint64(4*publishers+4096)); lim < uint64(4*publishers+1024) {
		t.Fatalf("RLIMIT_NOFILE is %d", lim)
	}
	run := randHex(3)
	// Reverse: one topic. Forward: one Kafka topic for all publishers, key
	// = the publisher's topic level (a fleet rule), so that the check reads
	// one topic; a key stays in one partition, in order.
	k, m := revTopic(t, "lb")
	kafkatest.CreateTopic(t, brokers, k, 1, nil)
	fwd, prefix := kafkatest.Topic(t, "lbfwd"), "lb"+run
	kafkatest.CreateTopic(t, brokers, fwd, 6, nil)
	cfgFile := filepath.Join(t.TempDir(), "ferry.yaml")
	yaml := fmt.Sprintf("reverse:\n  topics: [%s]\n  start_offset: earliest\ntopics:\n  reverse:\n    - kafka: %s\n      qos: 1\n"+
		"  forward:\n    - filter: %s/+\n      topic: %s\n      key: \"{2}\"\n", k, k, prefix, fwd)
	if err := os.WriteFile(cfgFile, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	var inst []*ferryProcess
	var backends []string
	for i := range 3 {
		p := startFerry(t, fmt.Sprintf("ferry-%d", i), cfgFile, "FERRY_KAFKA_BROKERS="+brokers,
			fmt.Sprintf("FERRY_INSTANCE_ID=lb%s-%d", run, i), "FERRY_KAFKA_ACK_TIMEOUT=5s")
		inst = append(inst, p)
		backends = append(backends, p.MQTTAddr)
	}
	lb := startHAProxy(t, backends)
	fig := scaleOutFigures{publishers: publishers, perClient: perClient, reverseRecords: revN, subscribers: len(inst)}

	// Reverse: one subscriber on each instance (direct, so that each
	// instance surely has one), then records produced to Kafka.
	cols := make([]*collector, len(inst))
	for i, p := range inst {
		cols[i] = &collector{}
		subscribePaho(t, p.MQTTAddr, fmt.Sprintf("lb-sub%d-%s", i, run), m, true, cols[i])
	}
	recs := make([]*kgo.Record, revN+1)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: k, Key: []byte("k"), Value: []byte("k." + strconv.Itoa(i))}
	}
	produceAll(t, kgoProducer(t, brokers), recs)
	waitFor(t, 120*time.Second, "every subscriber got every record and the sentinel", func() bool {
		for _, c := range cols {
			if c.len() < revN+1 {
				return false
			}
		}
		return true
	})
	for i, c := range cols {
		checkSeqOrder(t, fmt.Sprintf("subscriber on instance %d", i), c.snapshot(), revN+1)
	}

	// Forward through HAProxy, one instance killed mid-stream.
	topics := make([]string, publishers)
	for i := range topics {
		topics[i] = fmt.Sprintf("%s/p%d", prefix, i)
	}
	f := startFleet(t, func() string { return lb.addr }, "lb"+run, topics, perClient, 100, budget)
	victim, survivors := inst[1], []*ferryProcess{inst[0], inst[2]}
	// Kill once the victim has produced a tenth of its share.
	share := float64(publishers*perClient) / 3
	waitFor(t, 120*time.Second, "the victim carrying its share of the stream", func() bool {
		return victim.metric("ferry_kafka_records_produced_total") >= share/10
	})
	fig.onVictim = int(victim.metric("ferry_mqtt_connections"))
	kill := time.Now()
	victim.kill9()
	// Reconnected: the survivors hold every publisher again. Publishers
	// need about three fifths of the stream after this point, so none has
	// finished (and left) yet.
	waitFor(t, 60*time.Second, "every publisher reconnected to a survivor", func() bool {
		n := 0.0
		for _, s := range survivors {
			n += s.metric("ferry_mqtt_connections")
		}
		return n >= float64(publishers)-float64(f.done())
	})
	fig.reconnect = time.Since(kill)
	if fin := f.done(); fin > 0 {
		t.Logf("note: %d publishers had finished before all had reconnected", fin)
	}
	f.wait(t)
	fig.acked, fig.inKafka, fig.lost, fig.dups = verifyAckedInOrder(t, brokers, fwd, prefix, f.ledger)
	t.Logf("scale-out through HAProxy: %s", fig)
	if fig.acked != publishers*perClient {
		t.Fatalf("acked %d, want %d: publishers gave up", fig.acked, publishers*perClient)
	}
	if fig.onVictim == 0 {
		t.Fatalf("no publisher was on the killed instance: HAProxy did not balance")
	}
}

// verifyAckedInOrder reads ktopic, where each publisher's records (MQTT
// topic prefix/KEY) carry its topic level as the key: each acknowledged
// message must be in Kafka, and the first occurrences of a publisher's
// messages must be in increasing order (a resend after a reconnect may
// duplicate, never reorder). Returns acked, acked found, lost, duplicates.
func verifyAckedInOrder(t *testing.T, brokers, ktopic, prefix string, ledger *ackLedger) (acked, found, lost, dups int) {
	t.Helper()
	n := int(kafkatest.RecordCount(t, brokers, ktopic))
	msgs := kafkatest.ConsumeAll(t, brokers, ktopic, n, 120*time.Second)
	seen := map[string]map[int]int{} // MQTT topic -> seq -> copies
	last := map[string]int{}
	for _, m := range msgs { // by partition, then offset: a key's records in order
		topic := prefix + "/" + string(m.Key)
		s, err := strconv.Atoi(string(m.Value))
		if _, ok := ledger.acked[topic]; !ok || err != nil {
			t.Fatalf("%s: foreign record key %q value %q", ktopic, m.Key, m.Value)
		}
		if seen[topic] == nil {
			seen[topic], last[topic] = map[int]int{}, -1
		}
		if seen[topic][s] == 0 {
			if s <= last[topic] {
				t.Errorf("%s: message %d first appears after %d: reordered", topic, s, last[topic])
			}
			last[topic] = s
		}
		seen[topic][s]++
	}
	for _, byseq := range seen {
		for _, c := range byseq {
			dups += c - 1
		}
	}
	for topic, ok := range ledger.acked {
		for s, a := range ok {
			if !a {
				continue
			}
			acked++
			if seen[topic][s] == 0 {
				lost++
				if lost <= 10 {
					t.Errorf("%s: message %d was acknowledged but is not in Kafka", topic, s)
				}
			} else {
				found++
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d acknowledged messages are not in Kafka", lost)
	}
	return acked, found, lost, dups
}

// done counts the publishers that have returned (each files its result in
// the ledger when it does).
func (f *fleet) done() int {
	f.ledger.mu.Lock()
	defer f.ledger.mu.Unlock()
	return len(f.ledger.acked)
}
