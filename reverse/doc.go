// Package reverse is Ferry's reverse consumer, the Kafka -> MQTT path: it
// consumes reverse.topics in a consumer group and hands each record, as an
// MQTT message, to a Sink the bridge implements (which publishes it to the
// embedded broker's subscribers).
//
// # What it consumes
//
// The Kafka topics of reverse.topics (names, or /regex/ entries matched
// anchored, found again at each metadata refresh; Ferry's own _ferry_*
// topics never), in the group reverse.group_id (default "ferry-" +
// instance.id: each instance serves its own subscribers). Partitions
// without a commit start at the first record newer than the consumer's
// start (start_offset latest: listed end offset first, then the time, so a
// record appended between the two is not skipped: start.go) or at their
// first record (earliest). A topic deleted and re-created under it is
// consumed again from its first record. Transaction markers are read, not
// delivered.
//
// # What it delivers
//
// Each record maps to an MQTT topic with topicmap.Reverse; QoS is the
// rule's, lowered by an mqtt.qos header, or without a rule's the header's
// (default 1: topicmap.Delivery.RecordQoS); retain by the rule or
// mqtt.retain; other headers become user properties. Only the first of
// each reserved header is read. Records with no MQTT topic, an excluded
// one, or larger than mqtt.max_packet_size are skipped, counted
// (ferry_reverse_skipped_total{reason}) and committed: one bad record
// never stalls a partition.
//
// # Commits: at-least-once
//
// A record's offset is committed only once every QoS 1/2 delivery it
// produced to a clean session is acknowledged (or dropped): a clean session
// has nothing else to redeliver from. Deliveries to persistent sessions do
// not hold the commit back: each session keeps its own position in Kafka
// (package session). The committer closes a round every 200 ms and kgo
// commits what is marked every second, on a revoke, and at shutdown, after
// a bounded wait for clean sessions to acknowledge. A crash redelivers,
// never skips. Duplicates therefore come from: a crash or kill after
// delivery and before the commit (about the last 1.2 s of records, more
// while clean sessions have not acknowledged); a shutdown whose 2 s wait
// ran out; a partition revoked while clean sessions still held deliveries
// from it, or lost (its member's session timed out), in a shared group.
//
// # Loops
//
// Records whose ferry.origin header is this instance's id are skipped
// (reverse.skip_own, default on); the bridge's forward hook never bridges
// the Sink's (inline client's) publishes. A record another instance's
// forward path marked retained is not written to the retained table again
// (Delivery.WriteRetained is false): that instance wrote it before its
// PUBACK.
//
// # Pacing: Kafka is the buffer
//
// Before a QoS>0 delivery the consumer waits while a connected subscriber
// of the topic has half of min(mqtt.client_writes_pending, mochi's
// MaximumInflight) unacknowledged, at most 1 s per delivery however many
// subscribers are busy: those still stuck then are marked slow and not
// waited for until they have caught up (their overflow is dropped by mochi
// and counted). QoS 0 is
// not paced; offline persistent sessions are never waited for. Kafka is the
// buffer, not the subscribers' queues: a backlog waits in the topic.
//
// # Redelivery order
//
// InflightOrder, a mochi hook the bridge adds whether or not the consumer
// runs, numbers every QoS 1/2 delivery and makes mochi resend a resumed
// session's in-flight messages in that order; the committer reads from it
// what is still in flight to clean sessions. The consumer delivers inside
// its gate, which holds a resuming client's topics until its session is
// established, so that no delivery lands between mochi's copy of the old
// session and the resend.
//
// # What it needs from its caller
//
// A Sink: Deliver publishes one delivery (after the retained write it asks
// for; ErrStopped when ctx ended first: the record is not committed) from
// one goroutine in partition order; Handled receives each partition's
// progress (the session engine's reverse progress). Deps: the mochi server
// (the pacer is a hook on it and reads its subscribers' in-flight counts),
// the InflightOrder added to it, the topic map, the series (Metrics) and
// the Kafka security options. Lifecycle: New -> Run(ctx) (returns after the
// final commit) -> Close.
//
// The package imports mochi: the pacer and InflightOrder are hooks on the
// broker that read its clients' in-flight stores; keeping them in the
// bridge behind an interface would have meant redesigning both. Publishing
// stays with the bridge (the Sink).
package reverse
