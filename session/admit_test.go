package session

import (
	"errors"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ferry-bridge/ferry/state"
)

func clientOf(id, user string) *mqtt.Client {
	cl := &mqtt.Client{ID: id}
	cl.Properties.Username = []byte(user)
	return cl
}

// TestAdmissionCountsPerUser: the per-user count follows each client id's
// last record (a persistent one counts for its user, a clean one or a
// tombstone for nobody, a record of another user moves it), and a new
// persistent session past the cap is refused Quota exceeded while a resume
// of an existing one is not.
func TestAdmissionCountsPerUser(t *testing.T) {
	a := newAdmission(false, 0, 2, nil)
	now := time.Now()
	rec := func(id, user string, clean bool) *state.Session {
		return &state.Session{Client: id, Username: []byte(user), Clean: clean, Disconnected: now.UnixMilli(), Expiry: 60}
	}
	a.saw("x1", rec("x1", "alice", false))
	a.saw("x2", rec("x2", "alice", true)) // clean: not counted
	a.saw("x3", rec("x3", "alice", false))
	a.saw("x3", rec("x3", "alice", false)) // the same again
	code, err := a.check(clientOf("x4", "alice"), nil, nil, true, now, 0)
	if !errors.Is(err, ErrSessionQuota) || code != packets.ErrQuotaExceeded {
		t.Fatalf("alice's third persistent session: %v, 0x%02x; want quota exceeded", err, code.Code)
	}
	if _, err := a.check(clientOf("x1", "alice"), nil, rec("x1", "alice", false), true, now, 0); err != nil {
		t.Fatalf("alice resuming x1 at her cap: %v", err)
	}
	if _, err := a.check(clientOf("x4", "alice"), nil, nil, false, now, 0); err != nil {
		t.Fatalf("alice's clean session at her cap: %v", err)
	}
	a.saw("x3", rec("x3", "bob", false)) // x3 is bob's now
	if _, err := a.check(clientOf("x4", "alice"), nil, nil, true, now, 0); err != nil {
		t.Fatalf("alice with one session: %v", err)
	}
	a.saw("x1", nil)
	a.saw("x5", rec("x5", "bob", false))
	if _, err := a.check(clientOf("x6", "bob"), nil, nil, true, now, 0); !errors.Is(err, ErrSessionQuota) {
		t.Fatalf("bob's third: %v, want quota exceeded", err)
	}
	if len(a.users) != 2 || a.perUser["bob"] == nil || a.perUser["bob"].n != 2 || len(a.perUser) != 1 {
		t.Fatalf("index: users %v, per user %v", a.users, a.perUser)
	}
}

// TestAdmissionOwner: a live session of another user (connected, or
// persistent and not expired), or a connected client of another user here,
// refuses the CONNECT Not authorized; an expired one, a gone clean one, or
// the same user's does not.
func TestAdmissionOwner(t *testing.T) {
	a := newAdmission(true, 0, 0, nil)
	now := time.Now()
	off := &state.Session{Username: []byte("alice"), Disconnected: now.Add(-time.Minute).UnixMilli(), Expiry: 3600}
	for _, tc := range []struct {
		name   string
		prev   *state.Session
		user   string
		denied bool
	}{
		{"offline, other user", off, "mallory", true},
		{"offline, same user", off, "alice", false},
		{"connected clean, other user", &state.Session{Username: []byte("alice"), Clean: true, Connected: true}, "mallory", true},
		{"clean, gone", &state.Session{Username: []byte("alice"), Clean: true, Disconnected: 1}, "mallory", false},
		{"expired", &state.Session{Username: []byte("alice"), Disconnected: now.Add(-time.Hour).UnixMilli(), Expiry: 60}, "mallory", false},
		{"none", nil, "mallory", false},
	} {
		code, err := a.check(clientOf("x", tc.user), nil, tc.prev, false, now, 0)
		if got := errors.Is(err, ErrSessionOwner); got != tc.denied || got && code != packets.ErrNotAuthorized {
			t.Errorf("%s: %v, 0x%02x; denied %v", tc.name, err, code.Code, tc.denied)
		}
	}
	srv := mqtt.New(nil)
	here := srv.NewClient(nil, "t", "x", false)
	here.Properties.Username = []byte("alice")
	if _, err := a.check(clientOf("x", "mallory"), here, nil, false, now, 0); !errors.Is(err, ErrSessionOwner) {
		t.Errorf("a client of alice connected here: %v, want refused", err)
	}
}
