package session

import (
	"encoding/json"
	"reflect"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ferry-bridge/ferry/state"
)

// What a session record says of its client's connection: the claim
// (recordOf), the expiry, the Will and the CONNECT's properties, the last
// two as JSON without their zero fields (compactJSON).

// recordOf is the claim of cl's connection; keep: the session has state of
// its own (persistent, or resumed), else it is a clean session's claim.
func (h *sessionHook) recordOf(cl *mqtt.Client, keep bool) state.Session {
	rec := state.Session{Client: cl.ID, Owner: h.id, Connected: true, Clean: !keep,
		ProtocolVersion: cl.Properties.ProtocolVersion, Username: cl.Properties.Username, Will: willOf(cl)}
	if rec.Clean {
		// A claim, to fence a second connection of the id; with the Will
		// and its user, for a survivor to check and publish if this
		// instance dies (wills.go), and the user, whose session it is
		// while connected (admission).
		return rec
	}
	rec.Expiry = h.expiryOf(cl)
	rec.Listener = cl.Net.Listener
	rec.Props = propsJSON(cl.Properties.Props)
	return rec
}

// propsJSON is compactJSON of props: nothing for an MQTT 3.1.1 client's
// CONNECT (no properties), without encoding them. Encoding mochi's
// 40-field struct and compacting it again was a twentieth of an instance's
// CPU in a reconnect storm of 3.1.1 clients.
func propsJSON(props packets.Properties) json.RawMessage {
	if reflect.ValueOf(&props).Elem().IsZero() {
		return nil
	}
	b, err := json.Marshal(props.Copy(false))
	if err != nil {
		return nil
	}
	return compactJSON(b)
}

// compactJSON returns the JSON object b without its members of a zero
// value (null, false, 0, "", [], {}), nil when none is left: mochi's
// structs marshal every field, and a 3.1.1 client's properties, all zero,
// were half of its session record (363 of 692 bytes), kept by every
// instance. Unmarshalled into the same struct, the result is the same.
func compactJSON(b []byte) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return b
	}
	for k, v := range m {
		switch string(v) {
		case "null", "false", "0", `""`, "[]", "{}":
			delete(m, k)
		}
	}
	if len(m) == 0 {
		return nil
	}
	out, err := json.Marshal(m)
	if err != nil {
		return b
	}
	return out
}

// expiryOf is the session expiry of cl's session (seconds): MQTT 5 the
// client's (CONNECT, or DISCONNECT when it said one) up to the server's
// maximum, which mochi announces in CONNACK when it is lower; MQTT 3.1.1
// the maximum.
func (h *sessionHook) expiryOf(cl *mqtt.Client) uint32 {
	if cl.Properties.ProtocolVersion == 5 {
		return min(cl.Properties.Props.SessionExpiryInterval, h.maxExpiry())
	}
	return h.maxExpiry()
}

// maxExpiry is mqtt.max_session_expiry in seconds.
func (h *sessionHook) maxExpiry() uint32 {
	return h.server.Options.Capabilities.MaximumSessionExpiryInterval
}

func willOf(cl *mqtt.Client) json.RawMessage {
	if cl.Properties.Will.TopicName == "" {
		return nil
	}
	b, err := json.Marshal(cl.Properties.Will)
	if err != nil {
		return nil
	}
	return compactJSON(b)
}

func epochOf(s *state.Session) int64 {
	if s == nil {
		return 0
	}
	return s.Epoch
}
