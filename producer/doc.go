// Package producer writes records to Kafka over kafka-go's protocol client
// (its Transport), with a batcher of its own. It knows nothing of MQTT: its
// caller pushes Records into a ring and learns each one's outcome from its
// Done callback. In the comments here a record with Done and a Deadline is
// "QoS 1/2" (someone waits for it, until its deadline); one with neither is
// "QoS 0" (best effort).
//
// What it promises:
//
//   - Records in, exactly one result per record out: Done is called once,
//     with nil when Kafka acknowledged the record (Partition and Offset then
//     say where it is), else with an error wrapping ErrKafkaUnavailable,
//     ErrKafkaRejected, ErrTooLarge or ErrTopicRejected.
//   - Order per key: a partition has at most one produce request in flight,
//     so records of one key stay in order, and a retry resends the same
//     records before any later one. When a QoS 1/2 record fails, the later
//     records of its key already on their way fail too instead of
//     overtaking it (its client resends them in order); while a topic gains
//     partitions, a key that moves waits for its old partition to settle.
//   - One request per broker: every ready partition (records queued,
//     nothing in flight, leader known, not backing off) of every topic
//     joins one produce request to its leader broker; a broker has at most
//     two in flight, and what arrives meanwhile rides in the next one. A
//     batch leaves as soon as the ring runs dry, never on a timer (unless
//     Config.Linger is set).
//   - Isolation: a request runs on a goroutine of its own and the loop never
//     waits for Kafka. A hung broker (no answer, no error until the ack
//     timeout), a failing or leaderless partition, or a poison record (a
//     batch Kafka refuses for what one record may be is split, and only the
//     bad record fails) holds up only its own partitions.
//   - Bounded memory, backpressure through the ring: the producer holds at
//     most 16 x Config.MaxBatch records; then it stops reading the ring,
//     which fills, and the caller feels the backpressure. QoS 0 records
//     beyond a stalled partition's cap are dropped (Metrics.Dropped).
//   - Deadlines: every QoS 1/2 record fails at its own deadline, whatever
//     shares its request; a QoS 0 record is retried while the producer runs.
//   - Acks: Config.Acks, all by default (Done reports success once every
//     in-sync replica has the record).
//
// What it needs from its caller: a kafka.Client (NewTransport builds its
// transport, with TLS and SASL), a ring it pushes Records into and closes
// to stop the producer, and a goroutine for Run. Topics missing from Kafka
// are created (Config.Partitions and ReplicationFactor, LogAppendTime
// timestamps, at most Config.MaxCreatedTopics); keys are partitioned with
// Kafka's murmur2, as its Java client does. Run returns once the ring is
// closed and every record taken from it has its result; cancelling Run's
// context fails what is left. Records the caller takes out of the ring
// itself (an eviction) go through Producer.Failed, so that their keys keep
// their order.
package producer
