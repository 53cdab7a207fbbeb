package kafkawatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
)

// replicationCheckTimeout bounds one attempt of the replication check.
const replicationCheckTimeout = 5 * time.Second

// ReplicationCheck finds out, once Kafka answers, what replication factor
// the topics Ferry creates get (kafka.replication_factor, or for -1 a
// broker's default.replication.factor) and warns when it is 1 on a cluster
// of several brokers: every such topic (the state topics included) then
// lives on one broker, and is unavailable, or lost, with it.
type ReplicationCheck struct {
	Log        *slog.Logger
	Client     *kafka.Client
	Configured int           // kafka.replication_factor
	Retry      time.Duration // first wait after a failed attempt; doubles up to 30 s
}

// Run checks until one attempt gets an answer, or ctx ends.
func (c *ReplicationCheck) Run(ctx context.Context) {
	wait := c.Retry
	for {
		actx, cancel := context.WithTimeout(ctx, replicationCheckTimeout)
		err := c.Check(actx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return
		}
		c.Log.Debug("replication factor of created topics not checked yet (retrying)", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// Check is one attempt. An error means Kafka did not answer the metadata
// request (Run retries); a broker config it cannot read is logged, not
// retried.
func (c *ReplicationCheck) Check(ctx context.Context) error {
	md, err := c.Client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{}})
	if err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	brokers := len(md.Brokers)
	if brokers < 2 || c.Configured > 1 {
		return nil
	}
	if c.Configured == 1 {
		c.Log.Warn("kafka.replication_factor is 1 on a cluster of several brokers: every topic Ferry creates (the state topics _ferry_sessions and _ferry_retained too) keeps one copy, on one broker, and is unavailable or lost with it; leave it at -1 (the cluster's default.replication.factor) or set 3",
			"brokers", brokers, "replication_factor", c.Configured)
		return nil
	}
	id := md.Brokers[0].ID
	def, err := BrokerDefaultReplication(ctx, c.Client, id)
	if err != nil {
		c.Log.Info("cannot read the brokers' default.replication.factor, which the topics Ferry creates get (kafka.replication_factor -1)",
			"broker", id, "err", err)
		return nil
	}
	if def == 1 {
		c.Log.Warn("the topics Ferry creates get the cluster's default.replication.factor (kafka.replication_factor -1), which is 1 on a cluster of several brokers: every one of them (the state topics _ferry_sessions and _ferry_retained too) keeps one copy, on one broker, and is unavailable or lost with it; set default.replication.factor on the brokers, or kafka.replication_factor (e.g. 3)",
			"brokers", brokers, "broker", id, "default_replication_factor", def)
	}
	return nil
}

// BrokerDefaultReplication reads default.replication.factor of broker id.
func BrokerDefaultReplication(ctx context.Context, client *kafka.Client, id int) (int, error) {
	const name = "default.replication.factor"
	res, err := client.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{{
		ResourceType: kafka.ResourceTypeBroker, ResourceName: strconv.Itoa(id), ConfigNames: []string{name},
	}}})
	if err != nil {
		return 0, fmt.Errorf("describe configs: %w", err)
	}
	for _, r := range res.Resources {
		if r.Error != nil {
			return 0, fmt.Errorf("describe configs: %w", r.Error)
		}
		for _, e := range r.ConfigEntries {
			if e.ConfigName == name {
				n, err := strconv.Atoi(e.ConfigValue)
				if err != nil {
					return 0, fmt.Errorf("%s=%q: %w", name, e.ConfigValue, err)
				}
				return n, nil
			}
		}
	}
	return 0, errors.New(name + " not in the answer")
}
