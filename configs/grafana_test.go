package configs_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ferry-bridge/ferry/bridge"
)

// runBridge runs a bridge on loopback (MQTT and HTTP on port 0) with the
// registry cmd/bridge builds (ferry_*, go_* and process_* series) until the
// test ends.
func runBridge(t *testing.T, cfg bridge.Config) *bridge.Bridge {
	t.Helper()
	cfg.MQTT.Listen, cfg.HTTP.Listen = "127.0.0.1:0", "127.0.0.1:0"
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	b, err := bridge.New(cfg, nil, reg)
	if err != nil {
		t.Fatalf("bridge.New: %v", err)
	}
	errc := make(chan error, 1)
	go func() { errc <- b.Run(context.Background()) }()
	select {
	case <-b.Ready():
	case err := <-errc:
		t.Fatalf("bridge.Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("bridge not ready within 30s")
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = b.Close(ctx)
	})
	return b
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

// poll waits for cond, failing the test after timeout.
func poll(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exported maps every series name on /metrics (histograms as _bucket, _sum
// and _count, as exposed) to its label names.
func exported(t *testing.T, b *bridge.Bridge) map[string]map[string]bool {
	t.Helper()
	code, body := httpGet(t, "http://"+b.HTTPAddr()+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	out := map[string]map[string]bool{}
	series := regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? `)
	label := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		m := series.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		if out[m[1]] == nil {
			out[m[1]] = map[string]bool{}
		}
		for _, l := range label.FindAllStringSubmatch(m[2], -1) {
			out[m[1]][l[1]] = true
		}
	}
	return out
}

// exerciseBridge makes every labelled ferry_* family show a series (a vector
// with no series is absent from /metrics): a second bridge consumes the
// first's embedded Kafka so that the reverse path publishes, skips its own
// records and reports its lag; publishes to an unmappable topic are dropped
// (QoS 0) and refused (QoS 1): "//dash" would map to a Kafka name starting
// with "__", which Kafka reserves. A shared subscription on the second
// bridge gets a message its first member leaves unacknowledged, so that a
// second member gets it again (exerciseShare).
func exerciseBridge(t *testing.T) *bridge.Bridge {
	t.Helper()
	const mqttTopic, kafkaTopic = "/dash/t", "_dash_t"
	a := runBridge(t, bridge.DefaultConfig())
	pub := func(b *bridge.Bridge, topic string, qos byte) error {
		o := paho.NewClientOptions().AddBroker("tcp://" + b.MQTTAddr()).SetClientID(fmt.Sprintf("dash-%d", time.Now().UnixNano())).
			SetAutoReconnect(false).SetConnectTimeout(5 * time.Second)
		c := paho.NewClient(o)
		if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("connect: %v", tok.Error())
		}
		defer c.Disconnect(50)
		tok := c.Publish(topic, qos, false, "x")
		if !tok.WaitTimeout(10 * time.Second) {
			return fmt.Errorf("publish %s: no acknowledgement", topic)
		}
		return tok.Error()
	}
	if err := pub(a, mqttTopic, 1); err != nil {
		t.Fatal(err)
	}
	cfg := bridge.DefaultConfig()
	cfg.Instance.ID = "dash-b"
	cfg.Kafka.Brokers = a.KafkaBrokers()
	cfg.Reverse.Topics = []string{kafkaTopic}
	cfg.Reverse.StartOffset = "earliest"
	b := runBridge(t, cfg)
	if err := pub(b, mqttTopic, 1); err != nil {
		t.Fatal(err)
	}
	_ = pub(b, "//dash", 0)
	_ = pub(b, "//dash", 1) // refused: a v3.1.1 client is disconnected
	exerciseShare(t, b, func() error { return pub(a, "dash/s", 1) })
	var missing []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		m := exported(t, b)
		missing = missing[:0]
		for _, name := range []string{"ferry_reverse_consumer_lag", "ferry_reverse_skipped_total", "ferry_dropped_total", "ferry_mqtt_nacks_total",
			"ferry_share_members", "ferry_share_partitions", "ferry_share_lag", "ferry_share_delivered_total", "ferry_share_redelivered_total"} {
			if m[name] == nil {
				missing = append(missing, name)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s /metrics still lacks %q", missing)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return b
}

// exerciseShare gives b a shared subscription ($share/dash/dash/s) with a
// series in every ferry_share_* family: a first member that acknowledges
// nothing gets a message published with pub (on another bridge: b reads it
// from Kafka through the share group); a second member joins, and once b
// counts both the first leaves, so that the message goes to the second
// again. The second member stays connected until the test ends (the
// gauges' series go with the last member).
func exerciseShare(t *testing.T, b *bridge.Bridge, pub func() error) {
	t.Helper()
	const key = "$share/dash/dash/s"
	if err := pub(); err != nil { // the Kafka topic exists from here on
		t.Fatal(err)
	}
	member := func(id string, autoAck bool, got chan<- struct{}) paho.Client {
		o := paho.NewClientOptions().AddBroker("tcp://" + b.MQTTAddr()).SetClientID(id).
			SetAutoReconnect(false).SetConnectTimeout(5 * time.Second).SetAutoAckDisabled(!autoAck)
		o.SetDefaultPublishHandler(func(paho.Client, paho.Message) {
			select {
			case got <- struct{}{}:
			default:
			}
		})
		c := paho.NewClient(o)
		if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("connect %s: %v", id, tok.Error())
		}
		if tok := c.Subscribe(key, 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("subscribe %s: %v", key, tok.Error())
		}
		return c
	}
	series := func(name string) string { return name + `{group="` + key + `"} ` }
	first, second := make(chan struct{}, 1), make(chan struct{}, 1)
	a := member("dash-share-a", false, first)
	poll(t, 30*time.Second, "the share group's partitions assigned", func() bool {
		_, body := httpGet(t, "http://"+b.HTTPAddr()+"/metrics")
		return strings.Contains(body, series("ferry_share_partitions")) && !strings.Contains(body, series("ferry_share_partitions")+"0\n")
	})
	if err := pub(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first:
	case <-time.After(30 * time.Second):
		t.Fatal("the shared subscription's first member got nothing within 30s")
	}
	c := member("dash-share-b", true, second)
	t.Cleanup(func() { c.Disconnect(50) })
	poll(t, 10*time.Second, "both members counted", func() bool {
		_, body := httpGet(t, "http://"+b.HTTPAddr()+"/metrics")
		return strings.Contains(body, series("ferry_share_members")+"2\n")
	})
	a.Disconnect(0) // what it did not acknowledge goes to the second member
	select {
	case <-second:
	case <-time.After(30 * time.Second):
		t.Fatal("the shared subscription's second member got nothing within 30s")
	}
}

type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// promQL pieces: metric names (identifiers not followed by "(" and not
// keywords), label names in selectors and in by/without/on/ignoring lists.
var (
	promIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	promSelector = regexp.MustCompile(`\{([^}]*)\}`)
	promMatcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)`)
	promGrouping = regexp.MustCompile(`\b(by|without|on|ignoring)\s*\(([^)]*)\)`)
	promRange    = regexp.MustCompile(`\[[^\]]*\]`)
	promString   = regexp.MustCompile(`"[^"]*"`)
)

// metricNames returns the metric names an expression reads.
func metricNames(expr string) []string {
	e := promString.ReplaceAllString(expr, `""`)
	e = promSelector.ReplaceAllString(e, "")
	e = promGrouping.ReplaceAllString(e, "")
	e = promRange.ReplaceAllString(e, "")
	var out []string
	for _, loc := range promIdent.FindAllStringIndex(e, -1) {
		id := e[loc[0]:loc[1]]
		rest := strings.TrimLeft(e[loc[1]:], " ")
		if strings.HasPrefix(rest, "(") || slices.Contains([]string{"by", "without", "on", "ignoring", "and", "or", "unless", "bool", "offset"}, id) {
			continue
		}
		if id[0] >= '0' && id[0] <= '9' {
			continue
		}
		out = append(out, id)
	}
	return out
}

// labelNames returns the label names an expression uses.
func labelNames(expr string) []string {
	var out []string
	for _, sel := range promSelector.FindAllStringSubmatch(promString.ReplaceAllString(expr, `""`), -1) {
		for _, m := range promMatcher.FindAllStringSubmatch(sel[1], -1) {
			out = append(out, m[1])
		}
	}
	for _, g := range promGrouping.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(g[2], ",") {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, l)
			}
		}
	}
	return out
}

// scrapeLabels are added by Prometheus itself, not exported by the bridge.
var scrapeLabels = map[string]bool{"instance": true, "job": true}

func TestPromQLParsing(t *testing.T) {
	expr := `histogram_quantile(0.99, sum by (le) (rate(ferry_x_seconds_bucket{instance=~"$instance",qos!="0"}[$__rate_interval]))) / clamp_min(sum without (job) (ferry_y), 1)`
	if got, want := metricNames(expr), []string{"ferry_x_seconds_bucket", "ferry_y"}; !slices.Equal(got, want) {
		t.Errorf("metricNames = %q, want %q", got, want)
	}
	if got, want := labelNames(expr), []string{"instance", "qos", "le", "job"}; !slices.Equal(got, want) {
		t.Errorf("labelNames = %q, want %q", got, want)
	}
}

// TestGrafanaDashboard: deploy/grafana/ferry.json reads only series a
// running bridge exports (scraped from /metrics of a bridge on the embedded
// Kafka, with cmd/bridge's collectors; histograms by their _bucket, _sum and
// _count series), groups and filters only by labels those series carry (or
// Prometheus' own instance and job), and shows every ferry_* family.
func TestGrafanaDashboard(t *testing.T) {
	clearFerryEnv(t)
	raw, err := os.ReadFile("../deploy/grafana/ferry.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("ferry.json: %v", err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("dashboard title %q uid %q", d.Title, d.UID)
	}
	m := exported(t, exerciseBridge(t))
	used := map[string]bool{}
	queries := 0
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			if s, ok := q["query"].(string); ok {
				for _, name := range promIdent.FindAllString(strings.TrimPrefix(s, "label_values"), -1) {
					if strings.HasPrefix(name, "ferry_") && m[name] == nil {
						t.Errorf("variable %s reads %s, which the bridge does not export", v.Name, name)
					}
				}
			}
		}
	}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			queries++
			names := metricNames(tg.Expr)
			if len(names) == 0 {
				t.Errorf("panel %q: no metric in %q", p.Title, tg.Expr)
			}
			labels := map[string]bool{}
			for _, n := range names {
				used[n] = true
				ls, ok := m[n]
				if !ok {
					t.Errorf("panel %q uses %s, which the bridge does not export", p.Title, n)
					continue
				}
				for l := range ls {
					labels[l] = true
				}
			}
			for _, l := range labelNames(tg.Expr) {
				if !labels[l] && !scrapeLabels[l] {
					t.Errorf("panel %q uses label %q, which none of %q carries", p.Title, l, names)
				}
			}
		}
	}
	if queries < 15 {
		t.Errorf("only %d queries in the dashboard", queries)
	}
	// Every ferry_* family is on the dashboard (a histogram through any of
	// its series).
	for name := range m {
		if !strings.HasPrefix(name, "ferry_") {
			continue
		}
		base := name
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			base = strings.TrimSuffix(base, suf)
		}
		if !used[name] && !used[base+"_bucket"] && !used[base+"_sum"] && !used[base+"_count"] {
			t.Errorf("the bridge exports %s but no panel shows it", name)
		}
	}
}
