package bridge

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
	"github.com/ferry-bridge/ferry/topicmap"
)

// startReverseChild starts this test binary as a bridge process consuming
// topics, with storage.dir dir ("" for none), on mqttAddr. It is stopped
// (SIGTERM) at the end of the test if still running.
func startReverseChild(t *testing.T, brokers, instance, mqttAddr, dir string, topics ...string) *childBridge {
	t.Helper()
	var quoted []string
	for _, k := range topics {
		quoted = append(quoted, strconv.Quote(k))
	}
	yaml := fmt.Sprintf("instance: {id: %s}\nmqtt: {listen: %q}\nhttp: {listen: \"\"}\nkafka: {brokers: [%s]}\n"+
		"reverse: {topics: [%s]}\nstorage: {dir: %q}\n",
		instance, mqttAddr, strings.Join(quotedAddrs(brokers), ", "), strings.Join(quoted, ", "), dir)
	file := filepath.Join(t.TempDir(), "child.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &childBridge{t: t, env: []string{childEnv + "=1", childConfigEnv + "=" + file}}
	c.start()
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			c.stop()
		}
	})
	return c
}

func quotedAddrs(brokers string) []string {
	var out []string
	for _, a := range kafkatest.Addrs(brokers) {
		out = append(out, strconv.Quote(a))
	}
	return out
}

// waitCommitted polls until group has committed offset want on partition 0
// of each topic.
func waitCommitted(t *testing.T, brokers, group string, want map[string]int64) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkatest.Addrs(brokers)...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var last string
	waitFor(t, 30*time.Second, "committed offsets "+fmt.Sprint(want), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		offs, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			last = err.Error()
			return false
		}
		for topic, n := range want {
			o, ok := offs.Lookup(topic, 0)
			if !ok || o.At != n {
				last = fmt.Sprintf("%s: %+v", topic, o.At)
				return false
			}
		}
		return true
	})
	_ = last
}

// dupCollector keeps payloads in arrival order with their DUP flags.
type dupCollector struct {
	mu   sync.Mutex
	msgs []string
	dups []bool
}

func (c *dupCollector) handler(_ paho.Client, m paho.Message) {
	c.mu.Lock()
	c.msgs = append(c.msgs, string(m.Payload()))
	c.dups = append(c.dups, m.Duplicate())
	c.mu.Unlock()
}

func (c *dupCollector) snapshot() ([]string, []bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.msgs...), append([]bool(nil), c.dups...)
}

// TestReverseSessionSurvivesRestart (issue 16): a persistent QoS 1 session
// (mosquitto_sub -c) is offline while 100 records arrive; once the bridge
// has committed their offsets it is killed (-9) or stopped (SIGTERM) and
// started again on the same storage.dir. The subscriber reconnects with the
// same client id and does not subscribe: it receives 100 of 100, in order,
// with DUP set. Retained messages from Kafka (mqtt.retain) survive too, and
// one cleared by an empty retained record stays cleared.
func TestReverseSessionSurvivesRestart(t *testing.T) {
	msub, err := exec.LookPath("mosquitto_sub")
	if err != nil {
		t.Fatal("mosquitto_sub not installed (apt-get install mosquitto-clients; scripts/test.sh installs it)")
	}
	for _, how := range []string{"kill9", "sigterm"} {
		t.Run(how, func(t *testing.T) {
			brokers := kafkatest.Brokers(t)
			k, m := revTopic(t, "dur"+how)
			kr, _ := revTopic(t, "ret"+how)
			kafkatest.CreateTopic(t, brokers, k, 1, nil)
			kafkatest.CreateTopic(t, brokers, kr, 1, nil)
			instance := "dur-" + randHex(4)
			addr, dir := freeAddr(t), t.TempDir()
			child := startReverseChild(t, brokers, instance, addr, dir, k, kr)

			// Subscribe once with a persistent session, then go offline.
			host, port, _ := strings.Cut(addr, ":")
			subID := "dur-sub-" + randHex(4)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if out, err := exec.CommandContext(ctx, msub, "-h", host, "-p", port, "-c", "-i", subID, "-q", "1",
				"-t", m, "-E").CombinedOutput(); err != nil {
				t.Fatalf("mosquitto_sub -c -E: %v: %s", err, out)
			}

			const n = 100
			retTopic := "ferrytest/ret" + randHex(4)
			retained := func(topic, value string) *kgo.Record {
				return &kgo.Record{Topic: kr, Value: []byte(value), Headers: []kgo.RecordHeader{
					{Key: topicmap.HeaderMQTTTopic, Value: []byte(topic)}, {Key: topicmap.HeaderRetain, Value: []byte("true")}}}
			}
			recs := append(seqRecords(k, n, 1),
				retained(retTopic+"/keep", "kept"), retained(retTopic+"/clear", "gone"), retained(retTopic+"/clear", ""))
			produceAll(t, kgoProducer(t, brokers), recs)
			// Committed to Kafka: from here on only the store has them.
			waitCommitted(t, brokers, "ferry-"+instance, map[string]int64{k: n, kr: 3})

			if how == "kill9" {
				child.kill9()
			} else {
				child.stop()
			}
			startReverseChild(t, brokers, instance, addr, dir, k, kr)

			col := &dupCollector{}
			connectPaho(t, addr, subID, func(o *paho.ClientOptions) {
				o.SetOrderMatters(true).SetCleanSession(false).SetDefaultPublishHandler(col.handler)
			}) // no SUBSCRIBE: the stored session has it
			waitFor(t, 20*time.Second, "100 redelivered messages", func() bool { got, _ := col.snapshot(); return len(got) >= n })
			got, dups := col.snapshot()
			for i := range n {
				if want := fmt.Sprintf("0.%d", i); got[i] != want {
					t.Fatalf("after %s: message %d is %q, want %q (order as received: %q)", how, i, got[i], want, got)
				}
				if !dups[i] {
					t.Errorf("after %s: redelivered message %d has DUP clear", how, i)
				}
			}

			ret := &collector{}
			rc := subscribePaho(t, addr, "ret-"+randHex(4), retTopic+"/#", true, ret)
			// mochi writes a subscription's retained messages right after its
			// SUBACK, before it reads the next packet: once a second SUBACK is
			// back, every retained message is in.
			if tok := rc.Subscribe("ferrytest/none"+randHex(4), 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
				t.Fatalf("second subscribe: %v", tok.Error())
			}
			if r := ret.snapshot(); len(r) != 1 || r[0] != "kept" {
				t.Fatalf("retained after %s: %q, want only \"kept\"", how, r)
			}
		})
	}
}
