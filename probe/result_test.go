package probe

import (
	"bytes"
	"encoding/csv"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-bridge/ferry/probe/stats"
)

func TestCSVColumnsAreTheContract(t *testing.T) {
	contract := "direction,metric,count,lost,duplicated,reordered,throughput_msg_s,min_ms,avg_ms,p50_ms,p90_ms,p95_ms,p99_ms,p999_ms,max_ms,qos,payload_bytes,rate,clients"
	rows := []Row{
		{Direction: MQTTToKafka, Metric: MetricAppend, Status: "unavailable: CreateTime",
			Counts: stats.Counts{Expected: 10, Received: 9, Duplicated: 1, Reordered: 2}, QoS: 1, PayloadBytes: 12, Clients: 2},
		{Direction: MQTTToKafka, Metric: MetricE2E, Available: true, Status: "ok", ThroughputMsgS: 123.45,
			Counts:  stats.Counts{Expected: 10, Received: 9, Duplicated: 1, Reordered: 2},
			Figures: stats.Figures{Count: 9, Min: 0.101, Avg: 0.5, P50: 0.4, P90: 0.9, P95: 0.95, P99: 1.2, P999: 1.3, Max: 1.4},
			QoS:     1, PayloadBytes: 12, Rate: 1000, Clients: 2, Subscribers: 1, Warmup: 5, Negative: 3},
	}
	var buf bytes.Buffer
	if err := WriteCSV(&buf, rows); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("%d lines, want header + 2", len(recs))
	}
	if got := strings.Join(recs[0][:19], ","); got != contract {
		t.Fatalf("header:\n got %s\nwant %s", got, contract)
	}
	for i, r := range recs {
		if len(r) != len(recs[0]) {
			t.Fatalf("line %d has %d fields, header %d", i, len(r), len(recs[0]))
		}
	}
	want := "mqtt-to-kafka,e2e,9,1,1,2,123.5,0.101,0.500,0.400,0.900,0.950,1.200,1.300,1.400,1,12,1000,2"
	if got := strings.Join(recs[2][:19], ","); got != want {
		t.Fatalf("e2e row:\n got %s\nwant %s", got, want)
	}
	// An unavailable metric leaves its latency cells empty, never zero.
	if got := strings.Join(recs[1][7:15], ","); got != ",,,,,,," {
		t.Fatalf("unavailable append row latency cells %q", got)
	}
	if recs[1][21] != "unavailable: CreateTime" {
		t.Fatalf("status column %q", recs[1][21])
	}
}

func TestWriteRaw(t *testing.T) {
	var buf bytes.Buffer
	err := WriteRaw(&buf, []RawLine{
		{Seq: 0, SendNs: 1_000_000_000_400_000, AppendMs: 1_000_000_002, RecvNs: 1_000_000_003_650_000},
		{Seq: 1, SendNs: 150, AppendMs: noAppend},
	})
	if err != nil {
		t.Fatal(err)
	}
	// append_ms is a latency (2 ms after the send's whole ms), not the
	// absolute LogAppendTime it was; e2e_ms has microsecond resolution.
	want := "seq,send_ns,recv_ns,log_append_time_ms,append_ms,e2e_ms\n" +
		"0,1000000000400000,1000000003650000,1000000002,2,3.250\n1,150,,,,\n"
	if buf.String() != want {
		t.Fatalf("raw:\n%q\nwant\n%q", buf.String(), want)
	}
}

func TestWriteTableShape(t *testing.T) {
	res := &Result{
		Direction: MQTTToKafka, Config: DefaultConfig(MQTTToKafka), KafkaTopic: "_tacos_pub_lf", PayloadBytes: 12,
		Rows: []Row{
			{Direction: MQTTToKafka, Metric: MetricAppend, Status: "unavailable: no LogAppendTime"},
			{Direction: MQTTToKafka, Metric: MetricE2E, Available: true, Figures: stats.Figures{Avg: 2.44, Max: 70, P50: 2, P90: 4, P99: 5}},
		},
		Checks: []string{"clock: x"},
	}
	var buf bytes.Buffer
	if err := WriteTable(&buf, res); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"avg", "max", "50%", "90%", "99%", "2.440", "70.000", "unavailable: no LogAppendTime", "self-check:", "clock: x", "/tacos/pub/lf -> _tacos_pub_lf"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name  string
		d     Direction
		mod   func(*Config)
		field string
	}{
		{"payload below stamp", MQTTToKafka, func(c *Config) { c.PayloadSize = 11 }, "payload-size=11"},
		{"qos 3", MQTTToKafka, func(c *Config) { c.QoS = 3 }, "qos=3"},
		{"negative rate", KafkaToMQTT, func(c *Config) { c.Rate = -1 }, "rate=-1"},
		{"negative count", KafkaToMQTT, func(c *Config) { c.Count = -1 }, "count=-1"},
		{"negative warmup", KafkaToMQTT, func(c *Config) { c.Warmup = -1 }, "warmup=-1"},
		{"roundtrip to itself", Roundtrip, func(c *Config) {}, "reply-topic=/tacos/pub/lf"},
		{"bad direction", "sideways", func(c *Config) {}, "direction=sideways"},
		{"split not roundtrip", MQTTToKafka, func(c *Config) { c.SplitAtKafka = true }, "split-at-kafka=true"},
		{"roundtrip kafka topic without split", Roundtrip, func(c *Config) { c.ReplyTopic, c.KafkaTopic = "/back", "k" }, "kafka-topic=k"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig(tc.d)
			tc.mod(&cfg)
			err := cfg.Validate(tc.d)
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("err %v, want ErrConfig naming %s", err, tc.field)
			}
		})
	}
	ok := DefaultConfig(Roundtrip)
	ok.ReplyTopic = "/back"
	if err := ok.Validate(Roundtrip); err != nil {
		t.Fatal(err)
	}
	ok.ReplyTopic, ok.ReplyMQTT = "", "tcp://127.0.0.2:1883"
	if err := ok.Validate(Roundtrip); err != nil {
		t.Fatal(err)
	}
}

func TestPayloadTemplate(t *testing.T) {
	f := filepath.Join(t.TempDir(), "data.txt")
	if err := os.WriteFile(f, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := payloadTemplate(Config{PayloadFile: f})
	if err != nil || string(p[12:]) != "hello" {
		t.Fatalf("file only: %q %v", p, err)
	}
	p, err = payloadTemplate(Config{PayloadFile: f, PayloadSize: 20})
	if err != nil || string(p[12:]) != "hellohel" {
		t.Fatalf("file + size: %q %v", p, err)
	}
	if _, err := payloadTemplate(Config{PayloadFile: filepath.Join(t.TempDir(), "none")}); !errors.Is(err, ErrConfig) {
		t.Fatalf("missing file: %v", err)
	}
}
