package bridge

import (
	"crypto/tls"
	"fmt"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferry-bridge/ferry/internal/kafkasec"
	"github.com/ferry-bridge/ferry/producer"
)

// newTransport builds the kafka-go transport with TLS and SASL from cfg.
func newTransport(cfg KafkaConfig, clientID string) (*kafka.Transport, error) {
	tc, err := kafkasec.ClientTLS(kafkasec.TLS(cfg.TLS))
	if err != nil {
		return nil, err
	}
	return producer.NewTransport(clientID, tc, producer.SASL{Mechanism: cfg.SASL.Mechanism, Username: cfg.SASL.Username, Password: cfg.SASL.Password})
}

// kgoSecurityOpts are the TLS and SASL options of a franz-go client.
func kgoSecurityOpts(k KafkaConfig) ([]kgo.Opt, error) {
	return kafkasec.KgoOpts(kafkasec.TLS(k.TLS), kafkasec.SASL(k.SASL))
}

// serverTLS builds the MQTT TLS listener's config; with a CA, client
// certificates are required and verified.
func serverTLS(cfg TLSConfig) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(cfg.Cert, cfg.Key)
	if err != nil {
		return nil, fmt.Errorf("mqtt.tls.cert/key: %w", err)
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if cfg.CA != "" {
		pool, err := kafkasec.LoadPool(cfg.CA, "mqtt.tls.ca")
		if err != nil {
			return nil, err
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}
