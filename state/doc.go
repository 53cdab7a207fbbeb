// Package state keeps the broker state Ferry must not lose in compacted
// Kafka topics, so that instances share nothing but Kafka and any instance
// can serve any client.
//
// The contract:
//
//   - A Table is one compacted topic read whole: key -> the value of its
//     last record, in memory, or only where that record is when
//     TableConfig.Keep leaves the value in Kafka (Read reads it again). Put and Delete return only once Kafka has
//     acknowledged the record with acks=all (the idempotent producer keeps
//     the writes of one key in order under retries, which kafka-go cannot:
//     a retried older write landing after a newer one would revert a key in
//     a compacted log). A Delete is a tombstone (a null value); an empty,
//     non-nil value is a value.
//   - Read-your-writes: Sync returns once this instance has applied every
//     record appended to the table before Sync was called (it lists the end
//     offsets, then waits for the reader to pass them; concurrent Syncs
//     share a listing that started after each was called). A Read after
//     Sync sees the latest write of any instance.
//   - Order: the table applies records in log order, the order compaction
//     keeps. What a value means (an epoch that fences a stale owner, for
//     one) is the caller's; the watcher sees every record as it is read,
//     those this instance's own later write already superseded too (marked
//     Superseded), so a caller can repair a stale write it sees.
//
// Page lists a table's keys in order, a page at a time, from a sorted
// index of the keys built at its first call (page.go): the admin API's
// listings, which never decode the table.
//
// Session records (Session) live in one table, retained messages in
// another; the bridge package attaches both to the MQTT broker.
package state
