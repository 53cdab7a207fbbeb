package bridge

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestCreatedTopicLogSaysRealTimestampType: the "created kafka topic" line
// names the timestamp type the records really get. With the embedded Kafka
// that is CreateTime (kfake keeps the LogAppendTime config but does not
// apply it); the line said LogAppendTime.
func TestCreatedTopicLogSaysRealTimestampType(t *testing.T) {
	b, logs, errc := runLogged(t, testConfig(""))
	awaitReady(t, b, errc)
	topic := uniqueTopic("stamp")
	c := connectPaho(t, b.MQTTAddr(), "stamp-"+randHex(3))
	if tok := c.Publish(topic, 1, false, "x"); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		t.Fatalf("publish: %v", tok.Error())
	}
	kt := kafkaName(t, topic)
	line := regexp.MustCompile(`msg="created kafka topic" topic=` + regexp.QuoteMeta(kt) + `.* timestamp_type=(\w+)`)
	var logged string
	waitFor(t, 10*time.Second, "the created-topic log line", func() bool {
		if m := line.FindStringSubmatch(logs.String()); m != nil {
			logged = m[1]
			return true
		}
		return false
	})

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.KafkaBrokers()...), kgo.ConsumeTopics(kt),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var rec *kgo.Record
	for rec == nil && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { rec = r })
	}
	if rec == nil {
		t.Fatal("record not read back")
	}
	actual := map[int8]string{0: "CreateTime", 1: "LogAppendTime"}[rec.Attrs.TimestampType()]
	if logged != actual {
		t.Fatalf("log says timestamp_type=%s, the record carries %s:\n%s", logged, actual, strings.TrimSpace(logs.String()))
	}
}
