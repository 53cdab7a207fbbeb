package bridge

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// newTransport builds the kafka-go transport with TLS and SASL from cfg.
func newTransport(cfg KafkaConfig, clientID string) (*kafka.Transport, error) {
	t := &kafka.Transport{ClientID: "ferry-" + clientID, DialTimeout: 5 * time.Second, MetadataTTL: 3 * time.Second}
	if cfg.TLS.Enabled || cfg.TLS.CA != "" || cfg.TLS.Cert != "" {
		tc, err := clientTLS(cfg.TLS)
		if err != nil {
			return nil, err
		}
		t.TLS = tc
	}
	if cfg.SASL.Mechanism != "" {
		mech, err := saslMechanism(cfg.SASL)
		if err != nil {
			return nil, err
		}
		t.SASL = mech
	}
	return t, nil
}

func saslMechanism(cfg SASLConfig) (sasl.Mechanism, error) {
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

func loadPool(path, key string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s=%s: %w", key, path, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s=%s: no PEM certificates found", key, path)
	}
	return pool, nil
}

func clientTLS(cfg TLSConfig) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CA != "" {
		pool, err := loadPool(cfg.CA, "kafka.tls.ca")
		if err != nil {
			return nil, err
		}
		tc.RootCAs = pool
	}
	if cfg.Cert != "" || cfg.Key != "" {
		cert, err := tls.LoadX509KeyPair(cfg.Cert, cfg.Key)
		if err != nil {
			return nil, fmt.Errorf("kafka.tls.cert/key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
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
		pool, err := loadPool(cfg.CA, "mqtt.tls.ca")
		if err != nil {
			return nil, err
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}
