package producer

import (
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// SASL is a Kafka SASL authentication. Mechanism: "" (off), PLAIN,
// SCRAM-SHA-256 or SCRAM-SHA-512 (any case).
type SASL struct {
	Mechanism, Username, Password string
}

// NewTransport builds the kafka-go transport of a producer's client:
// client id "ferry-" + clientID, TLS when tc is not nil, and auth. Close it
// with kafkaclient.CloseIdle once its last user is done.
func NewTransport(clientID string, tc *tls.Config, auth SASL) (*kafka.Transport, error) {
	t := &kafka.Transport{ClientID: "ferry-" + clientID, DialTimeout: 5 * time.Second, MetadataTTL: 3 * time.Second, TLS: tc}
	if auth.Mechanism != "" {
		mech, err := saslMechanism(auth)
		if err != nil {
			return nil, err
		}
		t.SASL = mech
	}
	return t, nil
}

func saslMechanism(cfg SASL) (sasl.Mechanism, error) {
	switch strings.ToUpper(cfg.Mechanism) {
	case "PLAIN":
		return plain.Mechanism{Username: cfg.Username, Password: cfg.Password}, nil
	case "SCRAM-SHA-256":
		m, err := scram.Mechanism(scram.SHA256, cfg.Username, cfg.Password)
		if err != nil {
			return nil, fmt.Errorf("kafka.sasl: %w", err)
		}
		return m, nil
	case "SCRAM-SHA-512":
		m, err := scram.Mechanism(scram.SHA512, cfg.Username, cfg.Password)
		if err != nil {
			return nil, fmt.Errorf("kafka.sasl: %w", err)
		}
		return m, nil
	}
	return nil, fmt.Errorf("kafka.sasl.mechanism=%q: unknown", cfg.Mechanism)
}
