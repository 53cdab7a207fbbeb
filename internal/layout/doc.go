// Package layout holds no code: its test checks the repository's package
// graph and documentation rules with `go list`, so that a change that
// breaks them fails the suite. The rules: only cmd/bridge imports bridge
// (the packages it wires — the producer, the session engine, the reverse
// consumer, state, topicmap, ringbuffer — know nothing of it); the Kafka
// producer and the leaf packages import no MQTT library; no package
// imports a command; every package opens with a "// Package x" comment;
// no package holds more than 30% of the project's non-test lines, and
// bridge/ at most 4,000.
package layout
