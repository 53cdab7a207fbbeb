package backend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/instance"
	"github.com/ferry-bridge/ferry/internal/kafkaclient"
	"github.com/ferry-bridge/ferry/producer"
)

// adminTopic carries the admin API's requests to the instance that must
// act (the owner of a client's connection) and its replies: instances
// share nothing but Kafka, so an action asked of any instance reaches the
// owner through it, as a takeover does through the sessions topic.
const adminTopic = "_ferry_admin"

// controlMsg is one record of adminTopic: a request (Op names it) or a
// reply (Op "reply", ID the request's).
type controlMsg struct {
	ID string `json:"id"`
	Op string `json:"op"`
	// To is the instance that acts (a request) or that asked (a reply);
	// From and Run name the asking instance and its run (a request) or
	// the answering instance and the asking run (a reply); Sessions is
	// the sender's state.sessions_topic (clusters may share one Kafka).
	To       string          `json:"to"`
	From     string          `json:"from"`
	Run      string          `json:"run"`
	Sessions string          `json:"sessions"`
	Client   string          `json:"client,omitempty"`
	By       string          `json:"by,omitempty"`
	Reply    json.RawMessage `json:"reply,omitempty"`
	// Until (unix ms): a request read later is too late to act on.
	Until int64 `json:"until,omitempty"`
}

// control is this instance's end of adminTopic: it reads the requests
// addressed to it and hands them to handle (whose answer it writes back),
// and it writes requests and waits for their replies (ask).
type control struct {
	id, nonce, sessions string
	log                 *slog.Logger
	client              *kafka.Client
	replication         int
	opts                []kgo.Opt
	handle              func(op, client, by string) any

	mu      sync.Mutex
	waiting map[string]chan json.RawMessage
	cl      *kgo.Client
	ready   chan struct{} // closed once the topic exists and cl reads it

	stop chan struct{}
	done chan struct{}
}

func newControl(cfg Config, d Deps) (*control, error) {
	nonce := make([]byte, 8)
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("admin control nonce: %w", err)
	}
	c := &control{id: cfg.InstanceID, nonce: hex.EncodeToString(nonce), sessions: cfg.SessionsTopic,
		log: d.Log.With("component", "admin"), client: d.Client, replication: cfg.ReplicationFactor,
		waiting: make(map[string]chan json.RawMessage), ready: make(chan struct{}),
		stop: make(chan struct{}), done: make(chan struct{})}
	c.opts = append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID("ferry-" + cfg.InstanceID + "-admin"),
		kgo.ConsumeTopics(adminTopic),
		// From a little before the start, as the heartbeats (a broker
		// clock behind this host's must not hide the first requests);
		// older requests are past their Until, replies to other runs
		// are not this run's.
		kgo.ConsumeResetOffset(kgo.NewOffset().AfterMilli(cfg.Started.Add(-instance.Lookback).UnixMilli())),
		kgo.FetchMaxWait(time.Second),
		kgo.ProducerLinger(0),
		kgo.RecordDeliveryTimeout(5 * time.Second),
		kgo.WithLogger(kafkaclient.KgoLogger{Logger: c.log}),
	}, d.KafkaOpts...)
	return c, nil
}

// run creates the topic and reads it until close.
func (c *control) run() {
	defer close(c.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-c.stop
		cancel()
	}()
	for ctx.Err() == nil {
		err := instance.CreateControlTopic(ctx, c.client, adminTopic, c.replication)
		if err == nil {
			break
		}
		if errors.Is(err, producer.ErrTopicRejected) {
			c.log.Warn("admin actions on clients of other instances are OFF: cannot create or use the Kafka topic "+adminTopic, "err", err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
	cl, err := kgo.NewClient(c.opts...)
	if err != nil {
		c.log.Warn("admin actions on clients of other instances are OFF: cannot build a Kafka client", "err", err)
		return
	}
	defer cl.Close()
	c.mu.Lock()
	c.cl = cl
	c.mu.Unlock()
	close(c.ready)
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) { c.read(cl, r) })
		if err := fs.Err(); err != nil && ctx.Err() == nil && fs.NumRecords() == 0 {
			c.log.Debug("reading "+adminTopic, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// read handles one record: a request for this instance is acted on and
// answered; a reply to this run wakes its asker.
func (c *control) read(cl *kgo.Client, r *kgo.Record) {
	var m controlMsg
	if json.Unmarshal(r.Value, &m) != nil || m.To != c.id || m.Sessions != c.sessions {
		return
	}
	if m.Op == "reply" {
		if m.Run != c.nonce {
			return
		}
		c.mu.Lock()
		ch := c.waiting[m.ID]
		delete(c.waiting, m.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- m.Reply
		}
		return
	}
	if m.Until != 0 && time.Now().UnixMilli() > m.Until {
		return // its asker gave up
	}
	reply, err := json.Marshal(c.handle(m.Op, m.Client, m.By))
	if err != nil {
		return
	}
	out, err := json.Marshal(controlMsg{ID: m.ID, Op: "reply", To: m.From, Run: m.Run, From: c.id, Sessions: c.sessions, Reply: reply})
	if err != nil {
		return
	}
	cl.Produce(context.Background(), &kgo.Record{Topic: adminTopic, Key: []byte(m.From), Value: out}, func(_ *kgo.Record, err error) {
		if err != nil {
			c.log.Warn("admin reply not written", "op", m.Op, "client", m.Client, "to", m.From, "err", err)
		}
	})
}

// errNoAnswer: the instance asked did not answer in time.
var errNoAnswer = errors.New("no answer")

// ask has instance to act (op on client) and returns its answer, decoded
// into reply; errNoAnswer when none came before ctx ended.
func (c *control) ask(ctx context.Context, instance, op, client, by string, reply any) error {
	select {
	case <-c.ready:
	case <-ctx.Done():
		return fmt.Errorf("%w from %s: %s not read yet", errNoAnswer, instance, adminTopic)
	}
	idb := make([]byte, 8)
	if _, err := rand.Read(idb); err != nil {
		return fmt.Errorf("request id: %w", err)
	}
	id := hex.EncodeToString(idb)
	until := time.Now().Add(10 * time.Second)
	if d, ok := ctx.Deadline(); ok {
		until = d
	}
	m := controlMsg{ID: id, Op: op, To: instance, Run: c.nonce, From: c.id, Sessions: c.sessions, Client: client, By: by, Until: until.UnixMilli()}
	v, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("request: %w", err)
	}
	ch := make(chan json.RawMessage, 1)
	c.mu.Lock()
	c.waiting[id] = ch
	cl := c.cl
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiting, id)
		c.mu.Unlock()
	}()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: adminTopic, Key: []byte(instance), Value: v}).FirstErr(); err != nil {
		return fmt.Errorf("writing the request to %s: %w", adminTopic, err)
	}
	select {
	case raw := <-ch:
		if err := json.Unmarshal(raw, reply); err != nil {
			return fmt.Errorf("reply of %s: %w", instance, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w from instance %s within the deadline", errNoAnswer, instance)
	}
}

// close stops the reader and waits for it.
func (c *control) close() {
	close(c.stop)
	<-c.done
}
