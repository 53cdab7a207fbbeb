package bridge

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kfake"
)

// embeddedKafka is an in-process, in-memory Kafka (franz-go's kfake) used
// when no brokers are configured, so that one command shows the whole path.
// It keeps nothing on disk and timestamps are CreateTime: never production.
type embeddedKafka struct {
	cluster *kfake.Cluster
	addrs   []string
}

func startEmbeddedKafka() (*embeddedKafka, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0))
	if err != nil {
		return nil, fmt.Errorf("start kfake: %w", err)
	}
	return &embeddedKafka{cluster: c, addrs: c.ListenAddrs()}, nil
}

func (e *embeddedKafka) close() { e.cluster.Close() }
