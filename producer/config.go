package producer

import "time"

// Config tunes the producer. It has no defaults of its own: the caller
// (the bridge's kafka.* keys) sets every field and validates them.
type Config struct {
	// Acks: "all" (and ""), "one" or "none": how many replicas must have
	// a record before Kafka acknowledges it.
	Acks string
	// AckTimeout bounds one produce request and one metadata lookup; a
	// failed key's window is remembered this long (plus a second). It is
	// not the records' deadline: each Record carries its own.
	AckTimeout time.Duration
	// Linger delays a partial batch to let it fill; 0: a batch leaves as
	// soon as the ring runs dry.
	Linger time.Duration
	// MaxBatch is the most records of one partition in one produce request;
	// the producer holds at most 16 x MaxBatch records.
	MaxBatch int
	// MaxBatchBytes bounds one partition's batch (a larger record goes
	// alone); a request carries at most 4 x MaxBatchBytes.
	MaxBatchBytes int
	// Compression: none (and ""), gzip, snappy, lz4 or zstd.
	Compression string
	// Partitions, ReplicationFactor (ClusterReplicationFactor: the
	// brokers' default.replication.factor) of the topics the producer
	// creates, at most MaxCreatedTopics of them (0: no cap).
	Partitions        int
	ReplicationFactor int
	MaxCreatedTopics  int
	// Embedded says Kafka is the embedded in-memory one (kfake), which keeps
	// the topic config message.timestamp.type=LogAppendTime but stamps
	// records with the producer's CreateTime (kafka-go never sets the batch
	// attribute that would make kfake apply it): the log line of a created
	// topic says so.
	Embedded bool
}

// ClusterReplicationFactor as Config.ReplicationFactor creates topics with
// the brokers' default.replication.factor.
const ClusterReplicationFactor = -1

// CheckCompression reports whether name is a compression Config takes.
func CheckCompression(name string) error {
	_, err := compressionCodec(name)
	return err
}
