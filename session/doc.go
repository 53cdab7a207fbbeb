// Package session is Ferry's session engine: it keeps every MQTT session
// and retained message in Kafka (package state: compacted topics read into
// memory), so that any instance can resume any session and a kill -9 of
// one loses nothing that was acknowledged. It is a mochi hook (Engine.Hook)
// plus the replays of resumed sessions, the Wills of dead instances'
// clients and the reverse path's horizon.
//
// # The session record
//
// One record per client id in the sessions topic: the owner instance and
// its epoch, connected or since when not, the expiry, the CONNECT's
// properties and Will, the subscriptions (each with the time it was made),
// the positions, the horizon, and the deliveries sent and not yet
// acknowledged (packet id and Kafka coordinate). A tombstone ends the
// session. A session is named by its client id and names its user: with
// Config.SessionOwner another user's CONNECT with the id is refused (Not
// authorized); without, that user resumes it under its own ACL. New
// persistent sessions are capped in total and per user (Config.MaxSessions,
// Config.MaxSessionsPerUser: Quota exceeded), counted from the table.
//
// # Positions: the queue is in Kafka
//
// Every message Ferry delivers is in a Kafka topic already (the forward
// path wrote it before its PUBACK; the reverse path read it from one), so
// an offline session's queue is not a copy. For each partition it drew
// from, a session keeps its position (the offset of its oldest delivery not
// yet acknowledged, or one past the newest acknowledged) and delivered (one
// past the newest acknowledged). A position never passes what a running
// replay has handed out (its frontier), a delivery mochi dropped from a full
// outbound queue, or what this instance's reverse path has handed out of a
// partition it consumes (ReverseProgress, held lower by the forward path's
// own records awaiting local delivery: LocalAcked). The horizon, a time,
// covers the reverse partitions without a position: every older record
// there was handed out while the session was live, read by its replay, or
// is older than its subscriptions.
//
// With reading on demand (Deps.OnDemand) every partition is such a
// partition: the caller reads the topics its live subscriptions draw from
// (DemandTopics; ReverseProgress.Demand tells which, after handing out
// where each starts), and starts reading a topic before it delivers its
// own first record there; this instance's own records delivered here count
// as handed out. A position in a partition nothing was handed out of yet
// is not known: it is not written, and a resume reads that partition from
// the subscription's time. A dropped delivery (full outbound queue, the
// in-flight cap, a message expiry) keeps the position at it too (missed).
//
// # What is durable when
//
// Each write is acknowledged by Kafka (acks=all) before the packet that
// depends on it leaves: the claim before CONNACK; the subscription set
// before SUBACK / UNSUBACK (a failed write refuses the filters, or drops
// the connection unanswered for UNSUBSCRIBE); a retained publish's record
// before its PUBACK / PUBREC (the caller joins it with the forward path's
// record: Retained.Write). Positions are written every second while they
// move (and once a minute for an idle session's horizon: checkpoints.go)
// and when the client goes; a clean session's claim and a session's end
// are written without waiting.
//
// # What a resume reads
//
// A CONNECT with Clean Start 0 reads the sessions table to its end
// (read-your-writes), whatever the CONNECT's expiry says, then the
// session's record (from Kafka: an instance keeps in memory only the
// records of sessions connected to it), and claims the session before
// CONNACK; the subscriptions are checked against the
// connecting user's ACL. The replay then reads every partition the
// subscriptions can draw from (topics that map back to a matching MQTT
// topic, the reverse topics, every partition with a position) from the
// position, or the subscription's time (a reverse partition: the horizon
// when later), up to the end offsets it lists (a subscription's time
// bounds only what a partition read from a time owes it: a reverse
// partition read from its position owes every matching record from there,
// however old, as the reverse path hands a backlog out at its own pace); it
// resends the record's unacknowledged deliveries with their packet ids and
// DUP, checks each message against the ACL, and writes at most the client's
// Receive Maximum unacknowledged. Then the subscriptions go live, and a
// last pass reads what Kafka appended meanwhile, live deliveries held
// behind it. A live delivery of a record the replay handled is discarded
// (replay_copies.go).
//
// # Ownership and epochs
//
// The newer connection wins: its claim carries a higher epoch
// (state.NextEpoch), and an instance that reads a higher epoch for a
// session it serves disconnects its client (MQTT 5: 0x8E) and forgets the
// session. A former owner's write that lands after the claim (lower
// epoch, or its tombstone) is overwritten by the owner (repair on sight).
// Once the new owner has ended the session nobody repairs, so the former
// owner remembers for a while the sessions it lost and deletes its own
// late write again (lost.go). The Wills of a dead instance's clients are
// published by one survivor, chosen by rendezvous hashing, after it wrote
// and read back a fence (wills.go).
//
// # At-least-once: where duplicates come from
//
// Nothing acknowledged is skipped. What comes again: what was
// acknowledged after the last position write (a crash, or a reconnect
// elsewhere before the disconnect's write landed: the unacknowledged ones
// with DUP, the others without); messages published the moment a resumed
// subscription goes live; what the session had from the local path beyond
// a lagging reverse consumer; a message up to 1 s (HorizonSlack) older
// than a subscription; on a reverse partition read from its position, a
// message matching only a subscription made after the reverse path had
// handed the message out. A resume may deliver at most Config.MaxQueued new
// messages; the rest are dropped and counted.
//
// # What the engine needs from its caller
//
// Config and Deps at Open: the Kafka brokers and options, the broker, the
// topic map, the ACL's read check, the reverse topics, a registerer (the
// metrics keep their names), and a Deliverer: the forward hook's
// Subscribed and PublishWill, and the redelivery order's PutInFlight and
// TakenOutOfFlight. The caller adds Hook to the broker before its
// redelivery order hook, hands every heartbeat to Beat, brackets every
// injection of a Kafka record into the broker with Injections.Begin and
// End, reports its reverse consumer's progress (ReverseProgress.Handled)
// and its forward records awaiting local delivery (LocalAcked,
// LocalDelivered), and calls Flush and Close after the broker closed.
package session
