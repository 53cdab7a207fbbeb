package bridge

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferry-bridge/ferry/instance"
	"github.com/ferry-bridge/ferry/internal/kafkatest"
)

// readyz returns /readyz's status code and body.
func readyz(t testing.TB, httpAddr string) (int, string) {
	t.Helper()
	res, err := http.Get("http://" + httpAddr + "/readyz")
	if err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

// heartbeats waits until n heartbeats of instance id are in instance.Topic.
func heartbeats(t testing.TB, brokers, id string, n int, timeout time.Duration) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.ConsumeTopics(instance.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AfterMilli(time.Now().Add(-time.Minute).UnixMilli())))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	seen := 0
	for seen < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%d of %d heartbeats of %s within %s", seen, n, id, timeout)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Key) == id {
				seen++
			}
		})
	}
}

// armed reports whether the bridge's instance check has read back its own
// first heartbeat (from then on it would see a duplicate).
func armed(b *Bridge) bool { return b.instance.Armed() }

// TestDuplicateInstanceID: two running bridges with the same instance.id
// (real Kafka) both answer /readyz 503 naming the problem and set
// ferry_instance_id_duplicate; once one stops, the other is ready again.
func TestDuplicateInstanceID(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	cfg := testConfig(brokers)
	cfg.HTTP.Listen = "127.0.0.1:0"
	a := startBridge(t, cfg)
	b := startBridge(t, cfg)
	for _, br := range []*Bridge{a, b} {
		waitFor(t, 20*time.Second, "readyz 503 for the duplicate instance.id", func() bool {
			code, body := readyz(t, br.HTTPAddr())
			return code == http.StatusServiceUnavailable && strings.Contains(body, "duplicate instance.id")
		})
		if got := counterValue(t, br.reg, "ferry_instance_id_duplicate", nil); got != 1 {
			t.Errorf("ferry_instance_id_duplicate = %v, want 1", got)
		}
	}
	_, body := readyz(t, a.HTTPAddr())
	t.Logf("/readyz: %s", strings.TrimSpace(body))
	if !strings.Contains(body, cfg.Instance.ID) {
		t.Errorf("/readyz body %q does not name the instance.id %q", body, cfg.Instance.ID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		t.Fatalf("close the duplicate: %v", err)
	}
	waitFor(t, instance.StaleBeats*instanceHeartbeat+10*time.Second, "readyz 200 once the duplicate stopped", func() bool {
		code, _ := readyz(t, a.HTTPAddr())
		return code == http.StatusOK
	})
}

// TestInstanceRestartAfterKill9NotDuplicate: a bridge process killed with
// SIGKILL and restarted at once under the same instance.id (real Kafka) is
// not taken for a duplicate: the dead process's last heartbeats are in the
// topic, but none comes after the new run's own.
func TestInstanceRestartAfterKill9NotDuplicate(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	id := "kill9id-" + randHex(3)
	child := &childBridge{t: t, env: []string{childEnv + "=1",
		"FERRY_KAFKA_BROKERS=" + brokers, "FERRY_MQTT_LISTEN=" + freeAddr(t),
		"FERRY_INSTANCE_ID=" + id}}
	child.start()
	// Kill it once two of its heartbeats are in the topic.
	heartbeats(t, brokers, id, 2, 30*time.Second)
	child.kill9()

	cfg := testConfig(brokers)
	cfg.Instance.ID = id
	cfg.HTTP.Listen = "127.0.0.1:0"
	b := startBridge(t, cfg)
	waitFor(t, 20*time.Second, "own first heartbeat read back", func() bool { return armed(b) })
	// Several heartbeat periods: the restarted instance stays ready.
	end := time.Now().Add(3 * instanceHeartbeat)
	for time.Now().Before(end) {
		if code, body := readyz(t, b.HTTPAddr()); code != http.StatusOK {
			t.Fatalf("restarted instance not ready: %d %s", code, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestInstanceCheckOffWhenTopicRefused: when Kafka refuses to create
// _ferry_instances (here: replication factor 3 on the one-broker embedded
// Kafka), the bridge says the check is off and stays ready.
func TestInstanceCheckOffWhenTopicRefused(t *testing.T) {
	cfg := testConfig("")
	cfg.Kafka.ReplicationFactor = 3
	cfg.HTTP.Listen = "127.0.0.1:0"
	b, logs, errc := runLogged(t, cfg)
	awaitReady(t, b, errc)
	waitFor(t, 20*time.Second, "the warning that the check is off", func() bool {
		return strings.Contains(logs.String(), "duplicate instance.id check is OFF")
	})
	// /readyz also waits for the first Kafka reachability check (every
	// second): poll, a check that blocks readiness never turns it 200.
	waitFor(t, 10*time.Second, "/readyz 200 (the check being off does not block)", func() bool {
		code, _ := readyz(t, b.HTTPAddr())
		return code == http.StatusOK
	})
}

// TestCloseWhileKafkaStopsAnswering: Kafka (kfake) accepts the instance
// heartbeat's produce request and never answers it. Closing the bridge must
// still return promptly and without error: a heartbeat is best effort and
// must not hold a shutdown for kgo's request timeout (it did: "instance
// check close: context deadline exceeded" after 5s).
func TestCloseWhileKafkaStopsAnswering(t *testing.T) {
	fake, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	defer fake.Close()
	defer close(release)
	b := startBridge(t, testConfig(strings.Join(fake.ListenAddrs(), ",")))
	waitFor(t, 20*time.Second, "own first heartbeat read back", func() bool { return armed(b) })

	var held atomic.Int32
	// Every produce request from here on (only heartbeats: nothing is
	// published) is held until the test ends.
	fake.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		held.Add(1)
		fake.SleepControl(func() { <-release })
		return nil, nil, false
	})
	waitFor(t, 3*instanceHeartbeat, "a heartbeat held unanswered", func() bool { return held.Load() > 0 })

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	if err := b.Close(ctx); err != nil {
		t.Fatalf("Close with a heartbeat unanswered: %v (after %s)", err, time.Since(start).Round(time.Millisecond))
	}
	t.Logf("closed in %s with a heartbeat unanswered", time.Since(start).Round(time.Millisecond))
}
