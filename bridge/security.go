package bridge

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/segmentio/kafka-go"

	"github.com/ferry-bridge/ferry/producer"
)

// newTransport builds the kafka-go transport with TLS and SASL from cfg.
func newTransport(cfg KafkaConfig, clientID string) (*kafka.Transport, error) {
	var tc *tls.Config
	if cfg.TLS.Enabled || cfg.TLS.CA != "" || cfg.TLS.Cert != "" {
		var err error
		if tc, err = clientTLS(cfg.TLS); err != nil {
			return nil, err
		}
	}
	return producer.NewTransport(clientID, tc, producer.SASL{Mechanism: cfg.SASL.Mechanism, Username: cfg.SASL.Username, Password: cfg.SASL.Password})
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
