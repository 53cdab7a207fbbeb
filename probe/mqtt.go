package probe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// errTimeout is wrapped when a token does not complete in time.
var errTimeout = errors.New("timed out")

// connectMQTT opens one MQTT 3.1.1 client connection; open, if non-nil,
// makes the TCP connection (through an emulated link).
func connectMQTT(cfg Config, url, id string, open paho.OpenConnectionFunc, log *slog.Logger) (paho.Client, error) {
	opts := paho.NewClientOptions().
		AddBroker(url).
		SetClientID(id).
		SetCleanSession(true).
		SetAutoReconnect(false).
		SetConnectRetry(false).
		SetConnectTimeout(cfg.ConnectTimeout).
		SetKeepAlive(30 * time.Second).
		SetConnectionLostHandler(func(_ paho.Client, err error) {
			log.Warn("mqtt connection lost", "client", id, "broker", url, "err", err)
		})
	if open != nil {
		opts.SetCustomOpenConnectionFn(open)
	}
	if cfg.Username != "" {
		opts.SetUsername(cfg.Username).SetPassword(cfg.Password)
	}
	c := paho.NewClient(opts)
	tok := c.Connect()
	if err := waitToken(tok, cfg.ConnectTimeout); err != nil {
		return nil, fmt.Errorf("%w: connect to %s as %s: %w", ErrMQTTUnreachable, url, id, err)
	}
	return c, nil
}

// connectMany connects n clients concurrently; on error it disconnects
// those that did connect.
func connectMany(cfg Config, url, prefix string, n int, open paho.OpenConnectionFunc, log *slog.Logger) ([]paho.Client, error) {
	clients := make([]paho.Client, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			clients[i], errs[i] = connectMQTT(cfg, url, fmt.Sprintf("%s-%d", prefix, i), open, log)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		disconnectAll(clients)
		return nil, err
	}
	return clients, nil
}

func disconnectAll(clients []paho.Client) {
	for _, c := range clients {
		if c != nil && c.IsConnected() {
			c.Disconnect(100)
		}
	}
}

func waitToken(tok paho.Token, d time.Duration) error {
	if !tok.WaitTimeout(d) {
		return fmt.Errorf("no answer after %v: %w", d, errTimeout)
	}
	return tok.Error()
}

// subscribe subscribes c to topic and fails if the broker refuses it.
func subscribe(c paho.Client, url, topic string, qos byte, timeout time.Duration, h paho.MessageHandler) error {
	tok := c.Subscribe(topic, qos, h)
	if err := waitToken(tok, timeout); err != nil {
		return fmt.Errorf("%w: subscribe %q on %s: %w", ErrMQTTUnreachable, topic, url, err)
	}
	if st, ok := tok.(*paho.SubscribeToken); ok {
		if code, ok := st.Result()[topic]; ok && code == 0x80 {
			return fmt.Errorf("%w: subscribe %q on %s: refused by the broker (SUBACK 0x80)", ErrMQTTUnreachable, topic, url)
		}
	}
	return nil
}

// mqttSender publishes one client's messages with paho. With one publish
// in flight (the closed loop) each publish waits for its token (PUBACK at
// QoS 1). With more, publishes are pipelined; a waiter goroutine collects
// the tokens in order, at most inflight outstanding.
type mqttSender struct {
	c       paho.Client
	url     string
	topics  []string
	topicOf func(uint32) int
	qos     byte
	timeout time.Duration
	open    bool

	tokens chan paho.Token
	done   chan struct{}
	err    error // first token error, set by the waiter before done closes
}

func newMQTTSender(c paho.Client, url string, topics []string, topicOf func(uint32) int, qos byte,
	timeout time.Duration, inflight int) *mqttSender {
	s := &mqttSender{c: c, url: url, topics: topics, topicOf: topicOf, qos: qos, timeout: timeout, open: inflight > 1}
	if s.open {
		// paho's own limit is 65535 packet ids; the waiter holds one
		// token more than the channel.
		s.tokens = make(chan paho.Token, min(inflight-1, 65000))
		s.done = make(chan struct{})
		go s.wait()
	}
	return s
}

func (s *mqttSender) wait() {
	defer close(s.done)
	for tok := range s.tokens {
		if err := waitToken(tok, s.timeout); err != nil && s.err == nil {
			s.err = fmt.Errorf("%w: publish on %s: %w", ErrSend, s.url, err)
		}
	}
}

func (s *mqttSender) send(ctx context.Context, seq uint32, payload []byte) error {
	topic := s.topics[s.topicOf(seq)]
	tok := s.c.Publish(topic, s.qos, false, payload)
	if !s.open {
		if err := waitToken(tok, s.timeout); err != nil {
			return fmt.Errorf("%w: publish to %s on %s: %w", ErrSend, topic, s.url, err)
		}
		return nil
	}
	select {
	case s.tokens <- tok:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *mqttSender) flush(ctx context.Context) error {
	if !s.open {
		return nil
	}
	close(s.tokens)
	select {
	case <-s.done:
		return s.err
	case <-ctx.Done():
		return ctx.Err()
	}
}
