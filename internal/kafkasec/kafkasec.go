// Package kafkasec builds the security of Ferry's Kafka clients from the
// kafka.tls and kafka.sasl settings, in one place for all of them: the TLS
// config (franz-go's clients and the producer's kafka-go transport take the
// same one) and franz-go's TLS and SASL options (the reverse consumer, the
// session engine, the instance check). Error messages name the config keys.
package kafkasec

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// TLS is kafka.tls (fields in the order of the bridge's TLSConfig, which
// converts to it).
type TLS struct {
	Cert, Key, CA string
	// Enabled turns TLS on (with the system roots when CA is empty); a CA
	// or a certificate turns it on too.
	Enabled bool
}

// SASL is kafka.sasl. Mechanism: "" (off), PLAIN, SCRAM-SHA-256 or
// SCRAM-SHA-512 (any case).
type SASL struct {
	Mechanism, Username, Password string
}

// ClientTLS is the TLS config of a Kafka client, nil when TLS is off.
func ClientTLS(cfg TLS) (*tls.Config, error) {
	if !cfg.Enabled && cfg.CA == "" && cfg.Cert == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CA != "" {
		pool, err := LoadPool(cfg.CA, "kafka.tls.ca")
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

// KgoOpts are the TLS and SASL options of a franz-go client.
func KgoOpts(t TLS, s SASL) ([]kgo.Opt, error) {
	var opts []kgo.Opt
	tc, err := ClientTLS(t)
	if err != nil {
		return nil, err
	}
	if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	switch strings.ToUpper(s.Mechanism) {
	case "":
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism()))
	default:
		return nil, fmt.Errorf("kafka.sasl.mechanism=%q: unknown", s.Mechanism)
	}
	return opts, nil
}

// LoadPool reads the PEM certificates at path (the value of config key
// key) into a pool.
func LoadPool(path, key string) (*x509.CertPool, error) {
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
