package bridge

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
	"github.com/ferry-bridge/ferry/internal/testhelp"
	"github.com/ferry-bridge/ferry/share"
)

// ---------------------------------------------------------------- certificates

// testCA is a throw-away certificate authority.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  string // path of the CA certificate file
}

func newTestCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name+".pem")
	writePEM(t, path, "CERTIFICATE", der)
	return &testCA{cert: cert, key: key, pem: path}
}

// issue writes a leaf certificate and key signed by ca and returns their paths.
func (ca *testCA) issue(t *testing.T, dir, name string, server bool) (certPath, keyPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	writePEM(t, certPath, "CERTIFICATE", der)
	writePEM(t, keyPath, "EC PRIVATE KEY", kder)
	return certPath, keyPath
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// mosquittoPub runs mosquitto_pub with args and returns its combined output
// and error.
func mosquittoPub(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin, err := exec.LookPath("mosquitto_pub")
	if err != nil {
		t.Fatal("mosquitto_pub not installed (apt-get install mosquitto-clients; scripts/test.sh installs it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	return string(out), err
}

// ---------------------------------------------------------------- TLS

// TestTLSListener: mosquitto_pub connects over TLS, verifying the bridge's
// certificate with --cafile, and its QoS 1 message reaches Kafka. A client
// that does not trust the CA is refused by its own verification.
func TestTLSListener(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	dir := t.TempDir()
	ca := newTestCA(t, dir, "server-ca")
	other := newTestCA(t, dir, "other-ca")
	cert, key := ca.issue(t, dir, "server", true)

	cfg := testConfig(brokers)
	cfg.MQTT.TLSListen = "127.0.0.1:0"
	cfg.MQTT.TLS.Cert, cfg.MQTT.TLS.Key = cert, key
	b := startBridge(t, cfg)
	host, port, err := net.SplitHostPort(b.TLSAddr())
	if err != nil {
		t.Fatalf("TLS listener address %q: %v", b.TLSAddr(), err)
	}

	topic := uniqueTopic("tls")
	payload := "over-tls-" + randHex(4)
	if out, err := mosquittoPub(t, "-h", host, "-p", port, "--cafile", ca.pem, "-i", "tls-"+randHex(3),
		"-t", topic, "-q", "1", "-m", payload); err != nil {
		t.Fatalf("mosquitto_pub over TLS: %v\n%s", err, out)
	}
	msgs := readTopic(t, b.KafkaBrokers(), kafkaName(t, topic), 1, 30*time.Second)
	if string(msgs[0].Value) != payload {
		t.Fatalf("Kafka record value %q, want %q", msgs[0].Value, payload)
	}

	if out, err := mosquittoPub(t, "-h", host, "-p", port, "--cafile", other.pem, "-i", "tls-"+randHex(3),
		"-t", topic, "-q", "1", "-m", "untrusted"); err == nil {
		t.Fatalf("mosquitto_pub trusting another CA succeeded, want a verification failure\n%s", out)
	}
	// The plain TCP listener is unaffected.
	c := connectPaho(t, b.MQTTAddr(), "plain-"+randHex(3))
	if tok := c.Publish(topic, 1, false, "plain"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("plain publish: %v", tok.Error())
	}
}

// TestTLSClientCertificate: with mqtt.tls.ca set, a client without a
// certificate, or with one from another CA, is refused; one signed by the CA
// gets through to Kafka.
func TestTLSClientCertificate(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	dir := t.TempDir()
	serverCA := newTestCA(t, dir, "server-ca")
	clientCA := newTestCA(t, dir, "client-ca")
	rogueCA := newTestCA(t, dir, "rogue-ca")
	cert, key := serverCA.issue(t, dir, "server", true)
	goodCert, goodKey := clientCA.issue(t, dir, "device-1", false)
	badCert, badKey := rogueCA.issue(t, dir, "device-2", false)

	cfg := testConfig(brokers)
	cfg.MQTT.TLSListen = "127.0.0.1:0"
	cfg.MQTT.TLS.Cert, cfg.MQTT.TLS.Key, cfg.MQTT.TLS.CA = cert, key, clientCA.pem
	b := startBridge(t, cfg)
	host, port, _ := net.SplitHostPort(b.TLSAddr())
	topic := uniqueTopic("mtls")
	base := []string{"-h", host, "-p", port, "--cafile", serverCA.pem, "-t", topic, "-q", "1"}

	if out, err := mosquittoPub(t, append(base, "-i", "nocert-"+randHex(3), "-m", "no-cert")...); err == nil {
		t.Fatalf("client without certificate accepted\n%s", out)
	}
	if out, err := mosquittoPub(t, append(base, "-i", "rogue-"+randHex(3), "--cert", badCert, "--key", badKey, "-m", "rogue")...); err == nil {
		t.Fatalf("client certificate from another CA accepted\n%s", out)
	}
	payload := "mtls-" + randHex(4)
	if out, err := mosquittoPub(t, append(base, "-i", "good-"+randHex(3), "--cert", goodCert, "--key", goodKey, "-m", payload)...); err != nil {
		t.Fatalf("client with a valid certificate refused: %v\n%s", err, out)
	}
	msgs := readTopic(t, b.KafkaBrokers(), kafkaName(t, topic), 1, 30*time.Second)
	if string(msgs[0].Value) != payload {
		t.Fatalf("Kafka record value %q, want %q (refused clients must not reach Kafka)", msgs[0].Value, payload)
	}
}

// ---------------------------------------------------------------- metrics

// counterValue reads one series from a registry; 0 when absent.
func counterValue(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue next
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

// scrape fetches /metrics and returns every sample as "name{labels}" -> value.
func scrape(t testing.TB, httpAddr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	out := make(map[string]float64)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("/metrics: malformed line %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("/metrics: line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading /metrics: %v", err)
	}
	return out
}

// TestMetricsCountExactlyN: after N acknowledged QoS 1 publishes the
// received and produced counters have moved by exactly N, and every metric
// the README lists is exported.
func TestMetricsCountExactlyN(t *testing.T) {
	const n = 200
	cfg := testConfig(kafkatest.Brokers(t))
	cfg.HTTP.Listen = "127.0.0.1:0"
	b := startBridge(t, cfg)
	topic := uniqueTopic("metrics")
	c := connectPaho(t, b.MQTTAddr(), "metrics-"+randHex(3))

	// Warm up: topic creation and connections are not part of the count.
	if tok := c.Publish(topic, 1, false, "warm-up"); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		t.Fatalf("warm-up publish: %v", tok.Error())
	}
	const (
		recv     = `ferry_mqtt_publishes_received_total{qos="1"}`
		produced = `ferry_kafka_records_produced_total`
	)
	waitFor(t, 10*time.Second, "warm-up record counted", func() bool { return scrape(t, b.HTTPAddr())[produced] == 1 })
	before := scrape(t, b.HTTPAddr())
	if before[recv] != 1 {
		t.Fatalf("%s = %v after one publish, want 1", recv, before[recv])
	}
	if got := before["ferry_mqtt_connections"]; got != 1 {
		t.Fatalf("ferry_mqtt_connections = %v, want 1", got)
	}

	toks := make([]paho.Token, 0, n)
	for i := range n {
		toks = append(toks, c.Publish(topic, 1, false, fmt.Sprintf("m-%d", i)))
	}
	for i, tok := range toks {
		if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %d: %v", i, tok.Error())
		}
	}
	// PUBACK follows the Kafka acknowledgement, so the counters are final.
	after := scrape(t, b.HTTPAddr())
	if d := after[recv] - before[recv]; d != n {
		t.Errorf("%s moved by %v, want exactly %d", recv, d, n)
	}
	if d := after[produced] - before[produced]; d != n {
		t.Errorf("%s moved by %v, want exactly %d", produced, d, n)
	}
	if d := after["ferry_kafka_produce_errors_total"] - before["ferry_kafka_produce_errors_total"]; d != 0 {
		t.Errorf("ferry_kafka_produce_errors_total moved by %v, want 0", d)
	}
	if got := kafkatest.RecordCount(t, strings.Join(b.KafkaBrokers(), ","), kafkaName(t, topic)); got != int64(n+1) {
		t.Errorf("Kafka topic holds %d records, want %d", got, n+1)
	}
	if got := after["ferry_ring_capacity"]; got != float64(cfg.Ring.Capacity) {
		t.Errorf("ferry_ring_capacity = %v, want %d", got, cfg.Ring.Capacity)
	}
	for _, name := range documentedMetrics {
		found := false
		for k := range after {
			if k == name || strings.HasPrefix(k, name+"{") || strings.HasPrefix(k, name+"_bucket") || strings.HasPrefix(k, name+"_count") {
				found = true
				break
			}
		}
		if !found && !labelledOnly[name] {
			t.Errorf("metric %s not exported", name)
		}
	}
}

// documentedMetrics are the series the README lists.
var documentedMetrics = []string{
	"ferry_mqtt_connections",
	"ferry_mqtt_publishes_received_total",
	"ferry_mqtt_nacks_total",
	"ferry_mqtt_subscriber_drops_total",
	"ferry_reserved_properties_dropped_total",
	"ferry_kafka_records_produced_total",
	"ferry_kafka_produce_errors_total",
	"ferry_kafka_topics_created_total",
	"ferry_kafka_batch_records",
	"ferry_kafka_producer_records_held",
	"ferry_kafka_producer_topics",
	"ferry_kafka_produce_seconds",
	"ferry_publish_to_kafka_ack_seconds",
	"ferry_ring_depth",
	"ferry_ring_capacity",
	"ferry_dropped_total",
	"ferry_reverse_records_consumed_total",
	"ferry_reverse_published_total",
	"ferry_reverse_skipped_total",
	"ferry_reverse_consumer_lag",
	"ferry_demand_records_consumed_total",
	"ferry_demand_published_total",
	"ferry_demand_skipped_total",
	"ferry_demand_consumer_lag",
	"ferry_share_members",
	"ferry_share_partitions",
	"ferry_share_lag",
	"ferry_share_delivered_total",
	"ferry_share_redelivered_total",
}

// labelledOnly are vectors that have no series until a first event (their
// label values are not known in advance).
var labelledOnly = map[string]bool{
	"ferry_reverse_consumer_lag":    true,
	"ferry_demand_consumer_lag":     true,
	"ferry_share_members":           true, // per shared subscription (package share)
	"ferry_share_partitions":        true,
	"ferry_share_lag":               true,
	"ferry_share_delivered_total":   true,
	"ferry_share_redelivered_total": true,
}

// TestMetricsDocumented: the README's metrics list is exactly the set the
// bridge registers (no undocumented series, no stale entries).
func TestMetricsDocumented(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, func() float64 { return 0 }, func() float64 { return 8 })
	if err != nil {
		t.Fatal(err)
	}
	// Touch the vectors so that they gather.
	m.publishesByQoS.WithLabelValues("0").Inc()
	m.nacks.WithLabelValues("x").Inc()
	m.drops.WithLabelValues("x").Inc()
	m.reverseSkipped.WithLabelValues("x").Inc()
	m.reverseLag.WithLabelValues("t", "0").Set(1)
	m.demandLag.WithLabelValues("t", "0").Set(1)
	// The shared subscriptions' series, as startShare registers them.
	sm := share.NewMetrics()
	for _, c := range sm.Collectors() {
		reg.MustRegister(c)
	}
	sm.Members.WithLabelValues("$share/g/f").Set(1)
	sm.Partitions.WithLabelValues("$share/g/f").Set(1)
	sm.Lag.WithLabelValues("$share/g/f").Set(0)
	sm.Delivered.WithLabelValues("$share/g/f").Inc()
	sm.Redelivered.WithLabelValues("$share/g/f").Inc()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		got[mf.GetName()] = true
	}
	want := map[string]bool{}
	for _, n := range documentedMetrics {
		want[n] = true
		if !got[n] {
			t.Errorf("documented metric %s is not registered", n)
		}
	}
	for n := range got {
		if !want[n] {
			t.Errorf("registered metric %s is missing from documentedMetrics / README", n)
		}
	}
	readme, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatalf("README: %v", err)
	}
	for _, n := range documentedMetrics {
		if !bytes.Contains(readme, []byte("`"+n+"`")) {
			t.Errorf("docs/metrics.md does not list `%s`", n)
		}
	}
}

// ---------------------------------------------------------------- health

func httpStatus(t testing.TB, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(body))
}

func TestHealthzPprof(t *testing.T) {
	cfg := testConfig("")
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.HTTP.Pprof = true
	b := startBridge(t, cfg)
	if code, body := httpStatus(t, "http://"+b.HTTPAddr()+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d %q", code, body)
	}
	waitFor(t, 10*time.Second, "/readyz 200 with the embedded Kafka", func() bool {
		code, _ := httpStatus(t, "http://"+b.HTTPAddr()+"/readyz")
		return code == http.StatusOK
	})
	if code, _ := httpStatus(t, "http://"+b.HTTPAddr()+"/debug/pprof/cmdline"); code != http.StatusOK {
		t.Fatalf("/debug/pprof/cmdline with http.pprof = %d", code)
	}

	cfg = testConfig("")
	cfg.HTTP.Listen = "127.0.0.1:0"
	b = startBridge(t, cfg)
	if code, _ := httpStatus(t, "http://"+b.HTTPAddr()+"/debug/pprof/cmdline"); code != http.StatusNotFound {
		t.Fatalf("/debug/pprof/cmdline without http.pprof = %d, want 404", code)
	}
}

// TestReadyzFlipsWithEmbeddedKafka is the fast variant: an in-process Kafka
// (kfake) on a fixed port is closed and started again on the same port.
func TestReadyzFlipsWithEmbeddedKafka(t *testing.T) {
	port, err := strconv.Atoi(freePort(t))
	if err != nil {
		t.Fatal(err)
	}
	startFake := func() *kfake.Cluster {
		t.Helper()
		var c *kfake.Cluster
		var err error
		// The port was free a moment ago; retry briefly in case it lingers.
		waitFor(t, 10*time.Second, "kfake listening on its port", func() bool {
			c, err = kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port))
			return err == nil
		})
		return c
	}
	fake := startFake()
	t.Cleanup(func() { fake.Close() })

	cfg := testConfig(fmt.Sprintf("127.0.0.1:%d", port))
	cfg.HTTP.Listen = "127.0.0.1:0"
	b := startBridge(t, cfg)
	url := "http://" + b.HTTPAddr() + "/readyz"
	wait := func(want int) {
		t.Helper()
		waitFor(t, 20*time.Second, fmt.Sprintf("/readyz %d", want), func() bool {
			code, _ := httpStatus(t, url)
			return code == want
		})
	}
	wait(http.StatusOK)
	fake.Close()
	wait(http.StatusServiceUnavailable)
	if _, body := httpStatus(t, url); !strings.Contains(body, "kafka") {
		t.Errorf("/readyz body %q does not say Kafka is the problem", body)
	}
	fake = startFake()
	wait(http.StatusOK)
}

func freePort(t *testing.T) string {
	t.Helper()
	_, port, _ := net.SplitHostPort(testhelp.FreeAddr(t))
	return port
}

// ---------------------------------------------------------------- logging

// countingHandler counts records at or above Info.
type countingHandler struct {
	mu   sync.Mutex
	msgs []string // info and above
	all  []string // every level, for failure reports
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	msg := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		msg += " " + a.String()
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.all = append(h.all, msg)
	if r.Level >= slog.LevelInfo {
		h.msgs = append(h.msgs, msg)
	}
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

func (h *countingHandler) snapshot() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.msgs...)
}

// TestNoPerMessageLogs: once a topic exists, publishing to it (QoS 0, 1 and
// 2, connects and disconnects included) logs nothing at info or above.
func TestNoPerMessageLogs(t *testing.T) {
	cfg := testConfig(kafkatest.Brokers(t))
	h := &countingHandler{}
	b, err := New(cfg, slog.New(h), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = b.Run(context.Background()) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = b.Close(ctx)
	})
	select {
	case <-b.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("bridge not ready")
	}
	topic := uniqueTopic("logs")
	c := connectPaho(t, b.MQTTAddr(), "logs-warm-"+randHex(3))
	if tok := c.Publish(topic, 1, false, "warm-up"); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		h.mu.Lock()
		defer h.mu.Unlock()
		t.Fatalf("warm-up publish: %v; bridge log:\n%s", tok.Error(), strings.Join(h.all, "\n"))
	}
	mark := len(h.snapshot())

	for round := range 3 {
		c := connectPaho(t, b.MQTTAddr(), fmt.Sprintf("logs-%d-%s", round, randHex(3)))
		toks := make([]paho.Token, 0, 100)
		for i := range 100 {
			toks = append(toks, c.Publish(topic, byte(i%3), false, "x"))
		}
		for _, tok := range toks {
			if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
				t.Fatalf("publish: %v", tok.Error())
			}
		}
		c.Disconnect(100)
	}
	if extra := h.snapshot()[mark:]; len(extra) > 0 {
		t.Fatalf("%d log records at info+ while publishing 300 messages, want none:\n%s", len(extra), strings.Join(extra, "\n"))
	}
}
