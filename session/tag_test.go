package session

import (
	"encoding/json"
	"testing"

	"github.com/ferry-bridge/ferry/state"
)

// TestSessionTagAndServedHereReadTheFields: the quick looks at an encoded
// record (no JSON decoding) agree with the record's own fields, whatever
// its client id, properties or Will hold.
func TestSessionTagAndServedHereReadTheFields(t *testing.T) {
	tricky := `x","clean":true,"connected":true,"owner":"me`
	for _, client := range []string{"c1", tricky} {
		for _, owner := range []string{"me", "other"} {
			for _, connected := range []bool{false, true} {
				for _, clean := range []bool{false, true} {
					rec := state.Session{Client: client, Owner: owner, Connected: connected, Clean: clean, Expiry: 60,
						Props: json.RawMessage(`{"clean":true,"connected":true,"owner":"me"}`),
						Will:  json.RawMessage(`{"TopicName":"w","connected":true}`)}
					v, err := rec.Encode()
					if err != nil {
						t.Fatal(err)
					}
					want := uint8(tagOffline)
					switch {
					case clean:
						want = tagOther
					case connected:
						want = tagOnline
					}
					if got := sessionTag(v); got != want {
						t.Errorf("%+v: tag %d, want %d", rec, got, want)
					}
					if got, want := servedHere("me")(v), owner == "me" && connected; got != want {
						t.Errorf("%+v: served here %v, want %v", rec, got, want)
					}
				}
			}
		}
	}
}
