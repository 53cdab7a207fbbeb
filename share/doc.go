// Package share delivers MQTT shared subscriptions ($share/{group}/{filter})
// across Ferry's instances: each message to one member of the group,
// cluster-wide.
//
// A share group is a Kafka consumer group. The instances with live members
// of $share/{group}/{filter} join the consumer group named from the share
// name and the filter (Config.GroupName) over the Kafka topics the filter
// can draw from (the topics reading on demand would read for it); Kafka
// splits the partitions among them. An instance hands each record of its
// partitions, in offset order, to the member of its own with the fewest
// unacknowledged deliveries of the group (ties in turn), at most
// Config.MaxInflight each: a slow member gets less, a stalled one nothing.
//
// Offsets are committed only up to what was acknowledged: per partition,
// the lowest offset still owed (a QoS 1/2 delivery whose PUBACK or PUBCOMP
// has not come; QoS 0 is owed nothing once written to the member's
// queue). A member that goes hands what it owed to the instance's other
// members (counted redelivered); an instance whose last member went
// leaves the group, and an instance that dies is dropped by Kafka after
// the group's session timeout: the partitions go to the other instances,
// which read them from the committed offsets, so what was delivered and
// not acknowledged is delivered again (at least once).
//
// The embedded broker delivers nothing to shared subscriptions itself
// (Manager.OnSelectSubscribers): their messages come from the consumer
// group only, not from the instance's local publishes nor its other Kafka
// reads. A topic Ferry does not write to Kafka (topics.exclude) is the
// exception: its messages exist on their instance only, and the broker
// picks a member there.
package share
