package bridge

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

// embeddedKafka is an in-process, in-memory Kafka (franz-go's kfake) used
// when no brokers are configured, so that one command shows the whole path.
// It keeps nothing on disk and timestamps are CreateTime: never production.
// Like a stock Kafka (auto.create.topics.enable) it creates a topic a client
// asks for in a metadata request (kcat -P to a new topic); Ferry never asks,
// and creates its own topics with their configuration.
type embeddedKafka struct {
	cluster *kfake.Cluster
	addrs   []string
	// wanted is the configured port when it was in use and another was
	// taken (0: the configured port was used).
	wanted int
}

// startEmbeddedKafka listens on 127.0.0.1:port, or on any free port when
// port is 0 or in use.
func startEmbeddedKafka(port int) (*embeddedKafka, error) {
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.AllowAutoTopicCreation()}
	c, err := kfake.NewCluster(append(opts, kfake.Ports(port))...)
	wanted := 0
	if err != nil && port != 0 && errors.Is(err, syscall.EADDRINUSE) {
		wanted = port
		c, err = kfake.NewCluster(append(opts, kfake.Ports(0))...)
	}
	if err != nil {
		return nil, fmt.Errorf("start kfake: %w", err)
	}
	return &embeddedKafka{cluster: c, addrs: c.ListenAddrs(), wanted: wanted}, nil
}

func (e *embeddedKafka) close() { e.cluster.Close() }
