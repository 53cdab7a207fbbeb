package probe

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ferry-bridge/ferry/probe/stamp"
	"github.com/ferry-bridge/ferry/probe/stats"
	"github.com/ferry-bridge/ferry/topicmap"
)

// mqttTopics are the MQTT topics publishers send on: Topic, or Topic/0 ...
// Topic/N-1 with Topics > 1.
func (r *runner) mqttTopics() []string {
	if r.cfg.Topics <= 1 {
		return []string{r.cfg.Topic}
	}
	out := make([]string, r.cfg.Topics)
	for i := range out {
		out[i] = fmt.Sprintf("%s/%d", r.cfg.Topic, i)
	}
	return out
}

// kafkaTopics are the Kafka topics of mqttTopics: the bridge's default
// mapping, or KafkaTopic (with _0 ... _N-1 appended when Topics > 1).
func (r *runner) kafkaTopics() ([]string, error) {
	mt := r.mqttTopics()
	out := make([]string, len(mt))
	for i, t := range mt {
		switch {
		case r.cfg.KafkaTopic != "" && len(mt) == 1:
			out[i] = r.cfg.KafkaTopic
		case r.cfg.KafkaTopic != "":
			out[i] = fmt.Sprintf("%s_%d", r.cfg.KafkaTopic, i)
		default:
			k, err := topicmap.EncodeTopic(t)
			if err != nil {
				return nil, fmt.Errorf("%w: topic=%q has no default Kafka mapping (give --kafka-topic): %w", ErrConfig, t, err)
			}
			out[i] = k
		}
	}
	return out, nil
}

// topicOf is the topic index of a sequence: client c sends c, c+N, ...
// and each client cycles through the topics.
func (r *runner) topicOf(seq uint32) int {
	return int(seq / uint32(r.cfg.Clients) % uint32(r.cfg.Topics))
}

// orderKeys is the number of order keys of the run and the key of a
// sequence: its publisher (Kafka producer goroutine for kafka-to-mqtt) and
// topic. MQTT orders messages per publisher and topic, and nothing more.
func (r *runner) orderKeys() (int, func(uint32) int) {
	n, t := uint32(r.cfg.Clients), uint32(r.cfg.Topics)
	return int(n * t), func(seq uint32) int { return int(seq%n*t + seq/n%t) }
}

// pubSet is the run's MQTT publishers.
type pubSet struct {
	senders []sender
	raw     []*rawPublisher
	close   func()
}

// publishers connects cfg.Clients publishers to url with the configured
// client. onAck, if set, gets every acknowledged stamp (raw client only).
func (r *runner) publishers(ctx context.Context, url string, onAck func(stamp.Stamp, int64)) (*pubSet, error) {
	cfg := r.cfg
	topics := r.mqttTopics()
	if cfg.Client == ClientPaho {
		pubs, err := connectMany(cfg, url, r.clientID("pub"), cfg.Clients, r.opener(url), r.log)
		if err != nil {
			return nil, err
		}
		ps := &pubSet{close: func() { disconnectAll(pubs) }}
		for _, c := range pubs {
			ps.senders = append(ps.senders, newMQTTSender(c, url, topics, r.topicOf, byte(cfg.QoS), cfg.Timeout, cfg.Inflight))
		}
		return ps, nil
	}
	dial, err := r.rawDialer(url)
	if err != nil {
		return nil, err
	}
	conns := make([]*rawConn, cfg.Clients)
	errs := make([]error, cfg.Clients)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() {
			conns[i], errs[i] = dialRaw(ctx, cfg, url, fmt.Sprintf("%s-%d", r.clientID("pub"), i), dial)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, c := range conns {
			if c != nil {
				c.close()
			}
		}
		return nil, err
	}
	ps := &pubSet{}
	for _, c := range conns {
		p := newRawPublisher(c, r.clk, byte(cfg.QoS), cfg.Inflight, cfg.Timeout, r.template, topics, r.topicOf)
		p.onAck = onAck
		ps.raw = append(ps.raw, p)
		ps.senders = append(ps.senders, p)
	}
	ps.close = func() {
		for _, p := range ps.raw {
			p.close()
		}
	}
	return ps, nil
}

// describe is the self-check line about the publishers (after close).
func (ps *pubSet) describe(cfg Config) string {
	if len(ps.raw) == 0 {
		return fmt.Sprintf("publishers: %d paho (eclipse/paho.mqtt.golang) clients, %d publishes in flight each", cfg.Clients, cfg.Inflight)
	}
	acks := stats.NewLatency()
	var writes, bytes, sent int64
	for _, p := range ps.raw {
		acks.Merge(p.acks)
		w, b := p.c.writeStats()
		writes += w
		bytes += b
		sent += p.sent.Load()
	}
	line := fmt.Sprintf("publishers: raw MQTT 3.1.1 engine, %s, QoS %d", Plural(int64(cfg.Clients), "connection"), cfg.QoS)
	if cfg.QoS > 0 {
		f := acks.Figures()
		line += fmt.Sprintf(", %d publishes in flight each; %d acknowledgements timed (%s): p50 %.3f, p99 %.3f, max %.3f ms",
			cfg.Inflight, f.Count, map[int]string{1: "PUBACK", 2: "PUBREC->PUBREL->PUBCOMP"}[cfg.QoS], f.P50, f.P99, f.Max)
	}
	if writes > 0 {
		line += fmt.Sprintf("; %d write calls, %.0f bytes each", writes, float64(bytes)/float64(writes))
	}
	return line
}
