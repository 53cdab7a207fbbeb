package state

import (
	"encoding/json"
	"fmt"
	"time"
)

// Session is what the sessions table holds for one client id: the session
// as MQTT defines it (client properties, will, subscriptions) plus who owns
// it now. The value is JSON; Version says which shape.
//
// Ownership: Owner is the instance that holds the client's connection (or
// held it last), Epoch orders the owners of one session. A connection
// claims the session by writing a record with a higher epoch (NextEpoch)
// before its CONNACK; an instance that reads a claim of another owner for a
// session it serves disconnects its client (MQTT v5: 0x8E Session taken
// over) and forgets the session. A write of a former owner that lands after
// a claim carries a lower epoch: the owner that reads it writes its record
// again (repair on sight), so the log's last word is the owner's.
type Session struct {
	Version int    `json:"v"`
	Client  string `json:"client"`
	Owner   string `json:"owner"`
	Epoch   int64  `json:"epoch"`
	// Connected is false once the owner has seen the client go.
	Connected bool `json:"connected"`
	// Disconnected is when (unix ms) the client went; 0 while connected.
	Disconnected int64 `json:"disconnected,omitempty"`
	// Clean marks a session that ends with its connection (MQTT 3.1.1 clean
	// session, MQTT 5 session expiry 0): it is recorded only to fence a
	// second connection of the same id, and deleted when the client goes.
	Clean bool `json:"clean,omitempty"`
	// Expiry is the session expiry interval in seconds: MQTT 5 the
	// client's, at most the server maximum (mqtt.max_session_expiry);
	// MQTT 3.1.1 the server maximum.
	Expiry uint32 `json:"expiry"`

	ProtocolVersion byte            `json:"protocol"`
	Username        []byte          `json:"username,omitempty"`
	Listener        string          `json:"listener,omitempty"`
	Props           json.RawMessage `json:"props,omitempty"` // the client's CONNECT properties (opaque here)
	Will            json.RawMessage `json:"will,omitempty"`  // the client's will (opaque here)
	// WillBy names the instance that ended the session for a dead owner
	// (Connected false, Epoch one past the owner's) and publishes its Will.
	WillBy string         `json:"will_by,omitempty"`
	Subs   []Subscription `json:"subs,omitempty"`
	// Positions are the session's queue: for each Kafka partition it drew
	// messages from, where a resume reads from (session/positions.go).
	Positions []Position `json:"pos,omitempty"`
	// Horizon (unix ms) covers the reverse topics' partitions without a
	// position: every record there with an older timestamp was given to
	// the session, or did not match, or is older than its subscriptions. A
	// resume reads them from it (0: from the subscriptions' time).
	Horizon int64 `json:"horizon,omitempty"`
	// Pending are the deliveries not yet acknowledged when the record was
	// written, with their packet ids: a resume resends them with the same
	// id and DUP set [MQTT-4.4.0-1].
	Pending []Pending `json:"pending,omitempty"`
}

// Pending is one unacknowledged delivery: its packet id, where its
// message sits in Kafka, the QoS it was sent with (0: not recorded, a
// record written before it was) and, for QoS 2, whether the client's
// PUBREC had come (the server sent PUBREL): a resume resends that PUBREL,
// not the PUBLISH [MQTT-4.4.0-1], and a PUBLISH at the QoS it was first
// sent with [MQTT-4.3.3].
type Pending struct {
	PacketID  uint16 `json:"id"`
	Topic     string `json:"t"`
	Partition int32  `json:"p"`
	Offset    int64  `json:"o"`
	QoS       byte   `json:"q,omitempty"`
	Released  bool   `json:"rel,omitempty"`
}

// Position is a session's place in one Kafka partition: Offset is where a
// resume starts reading (the oldest delivery not yet acknowledged, or one
// past the newest acknowledged); Delivered is one past the newest
// acknowledged offset, so that what a resume delivers again is known to be
// a duplicate.
type Position struct {
	Topic     string `json:"t"`
	Partition int32  `json:"p"`
	Offset    int64  `json:"o"`
	Delivered int64  `json:"d,omitempty"`
}

// Subscription is one granted subscription of a session.
type Subscription struct {
	Filter            string `json:"filter"`
	QoS               byte   `json:"qos"`
	Identifier        int    `json:"id,omitempty"`
	NoLocal           bool   `json:"nl,omitempty"`
	RetainAsPublished bool   `json:"rap,omitempty"`
	RetainHandling    byte   `json:"rh,omitempty"`
	// Since is when (unix ms) the subscription was made: a resume delivers
	// from partitions without a position only what Kafka appended after it.
	Since int64 `json:"since,omitempty"`
}

// sessionVersion is the shape written by this code.
const sessionVersion = 1

// Encode returns s as a table value.
func (s *Session) Encode() ([]byte, error) {
	s.Version = sessionVersion
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("state: encode session %q: %w", s.Client, err)
	}
	return b, nil
}

// DecodeSession reads a table value.
func DecodeSession(b []byte) (*Session, error) {
	var s Session
	if err := decodeVersioned(b, &s, &s.Version, &s.Client); err != nil {
		return nil, err
	}
	return &s, nil
}

// decodeVersioned decodes b into v, whose version and client id fields
// are at version and client, and refuses a shape this build does not read.
func decodeVersioned(b []byte, v any, version *int, client *string) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("state: decode session: %w", err)
	}
	return checkVersion(*version, *client)
}

// checkVersion refuses a record shape this build does not read.
func checkVersion(version int, client string) error {
	if version != sessionVersion {
		return fmt.Errorf("state: session %q has version %d, this build reads %d", client, version, sessionVersion)
	}
	return nil
}

// sessionHead is the part of a record every instance reads of every
// session (who owns it, since when, whether it is connected, when it
// expires); DecodeSessionHead skips the rest.
type sessionHead struct {
	Version      int    `json:"v"`
	Client       string `json:"client"`
	Owner        string `json:"owner"`
	Epoch        int64  `json:"epoch"`
	Connected    bool   `json:"connected"`
	Disconnected int64  `json:"disconnected,omitempty"`
	Clean        bool   `json:"clean,omitempty"`
	Expiry       uint32 `json:"expiry"`
	WillBy       string `json:"will_by,omitempty"`
	// Username is the session's user: every instance counts the
	// persistent sessions of each user (mqtt.max_sessions_per_user) and
	// binds a session to its user (mqtt.session_owner).
	Username []byte `json:"username,omitempty"`
}

// DecodeSessionHead reads a table value's head: a Session with Version,
// Client, Owner, Epoch, Connected, Disconnected, Clean, Expiry, WillBy and
// Username set and nothing else (no subscriptions, positions, pending
// deliveries, properties or will). Every instance reads every session
// record the table's change feed brings, and this is all it needs of the
// sessions it does not serve: decoding the whole record (with positions
// and subscriptions) was a tenth of an instance's CPU in a reconnect storm.
func DecodeSessionHead(b []byte) (*Session, error) {
	var h sessionHead
	if !scanHead(b, &h) {
		h = sessionHead{}
		if err := decodeVersioned(b, &h, &h.Version, &h.Client); err != nil {
			return nil, err
		}
	} else if err := checkVersion(h.Version, h.Client); err != nil {
		return nil, err
	}
	return &Session{Version: h.Version, Client: h.Client, Owner: h.Owner, Epoch: h.Epoch, Connected: h.Connected,
		Disconnected: h.Disconnected, Clean: h.Clean, Expiry: h.Expiry, WillBy: h.WillBy, Username: h.Username}, nil
}

// NextEpoch is the epoch of a new claim after prev (0: none known): the
// wall clock in milliseconds, or prev+1 if that is not later. A session id
// whose record was deleted starts again from the clock, so a late write of
// a long-gone owner cannot outrank a new claim unless clocks are apart by
// more than the time between the two.
func NextEpoch(prev int64, now time.Time) int64 {
	return max(prev+1, now.UnixMilli())
}

// ExpiresAt is when (unix ms) a disconnected session expires: its expiry
// interval, at most limit seconds (the server's maximum, which may be lower
// than what a record written under another setting says; 0: no cap),
// after it went; 0 while it is connected.
func (s *Session) ExpiresAt(limit uint32) int64 {
	if s.Connected || s.Disconnected == 0 {
		return 0
	}
	e := s.Expiry
	if limit > 0 {
		e = min(e, limit)
	}
	return s.Disconnected + int64(e)*1000
}

// Expired reports whether a disconnected session has expired at now (see
// ExpiresAt).
func (s *Session) Expired(now time.Time, limit uint32) bool {
	at := s.ExpiresAt(limit)
	return at != 0 && now.UnixMilli() > at
}
