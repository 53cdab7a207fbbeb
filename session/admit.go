package session

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ferry-bridge/ferry/state"
)

// Errors a refused CONNECT's client is stopped with (admission).
var (
	// ErrSessionOwner: the client id's session belongs to another user
	// (Config.SessionOwner).
	ErrSessionOwner = errors.New("session belongs to another user")
	// ErrSessionQuota: a new persistent session would pass
	// Config.MaxSessions or Config.MaxSessionsPerUser.
	ErrSessionQuota = errors.New("session quota exceeded")
)

// admission decides, at CONNECT, whether a client may have the session of
// its id: with SessionOwner, a session (stored, or connected here) belongs
// to the user who made it; and a new persistent session must fit under
// the caps on persistent sessions, in total and per user. The counts are
// the sessions table's, which every instance reads: two instances
// admitting at the same moment may each let one session past a cap.
type admission struct {
	owner      bool
	maxTotal   int
	maxPerUser int
	total      func() int // persistent sessions in the table (nil: not counted)

	mu sync.Mutex
	// users: client id (its hash: every instance keeps one entry per
	// persistent session of the fleet) -> the user of its persistent
	// session (maxPerUser > 0), one count per user.
	users   map[uint64]*userCount
	perUser map[string]*userCount
}

// userCount is how many persistent sessions one user has.
type userCount struct {
	name string
	n    int
}

func newAdmission(owner bool, maxTotal, maxPerUser int, total func() int) *admission {
	a := &admission{owner: owner, maxTotal: maxTotal, maxPerUser: maxPerUser, total: total}
	if maxPerUser > 0 {
		a.users, a.perUser = make(map[uint64]*userCount), make(map[string]*userCount)
	}
	return a
}

// saw counts the session record rec of client id k (nil: deleted), in
// log order (the sessions table's reader).
func (a *admission) saw(k string, rec *state.Session) {
	if a == nil || a.users == nil {
		return
	}
	h := clientHash(k)
	a.mu.Lock()
	defer a.mu.Unlock()
	old := a.users[h]
	if rec == nil || rec.Clean {
		if old != nil {
			a.drop(h, old)
		}
		return
	}
	if old != nil && old.name == string(rec.Username) {
		return
	}
	if old != nil {
		a.drop(h, old)
	}
	u := a.perUser[string(rec.Username)]
	if u == nil {
		u = &userCount{name: string(rec.Username)}
		a.perUser[u.name] = u
	}
	u.n++
	a.users[h] = u
}

// drop forgets client hash h, a session of u (a.mu held).
func (a *admission) drop(h uint64, u *userCount) {
	delete(a.users, h)
	if u.n--; u.n <= 0 {
		delete(a.perUser, u.name)
	}
}

// clientHash is FNV-1a of a client id, mixed (ChooseInstance's mix64): a
// collision of two ids of a fleet (odds about 3e-8 with a million sessions) only
// miscounts one session.
func clientHash(k string) uint64 {
	f := fnv.New64a()
	_, _ = f.Write([]byte(k))
	return mix64(f.Sum64())
}

// check returns the CONNACK reason cl is refused with and why (nil: it
// may connect). prev is its id's record (nil: none), existing the broker's
// client of the id (nil: none), persistent whether cl's session outlives
// its connection, now the CONNECT's time, maxExpiry the server's cap on a
// session's expiry.
func (a *admission) check(cl, existing *mqtt.Client, prev *state.Session, persistent bool, now time.Time,
	maxExpiry uint32) (packets.Code, error) {
	if a == nil {
		return packets.CodeSuccess, nil
	}
	user := cl.Properties.Username
	// A session in the table: connected (a clean one too: taking it over
	// drops its client), or persistent and not expired.
	live := prev != nil && (prev.Connected || !prev.Clean && !prev.Expired(now, maxExpiry))
	if a.owner {
		if live && !bytes.Equal(prev.Username, user) {
			return packets.ErrNotAuthorized, fmt.Errorf("%w: client %q, session of %q", ErrSessionOwner, cl.ID, prev.Username)
		}
		if existing != nil && existing != cl && !existing.Closed() && !bytes.Equal(existing.Properties.Username, user) {
			return packets.ErrNotAuthorized, fmt.Errorf("%w: client %q, connected as %q", ErrSessionOwner, cl.ID, existing.Properties.Username)
		}
	}
	if !persistent || live && !prev.Clean {
		return packets.CodeSuccess, nil // no new persistent session
	}
	if a.maxTotal > 0 && a.total != nil {
		if n := a.total(); n >= a.maxTotal {
			return packets.ErrQuotaExceeded, fmt.Errorf("%w: %d persistent sessions, mqtt.max_sessions %d", ErrSessionQuota, n, a.maxTotal)
		}
	}
	if a.users != nil {
		var n int
		a.mu.Lock()
		if u := a.perUser[string(user)]; u != nil {
			n = u.n
		}
		a.mu.Unlock()
		if n >= a.maxPerUser {
			return packets.ErrQuotaExceeded, fmt.Errorf("%w: user %q has %d persistent sessions, mqtt.max_sessions_per_user %d",
				ErrSessionQuota, user, n, a.maxPerUser)
		}
	}
	return packets.CodeSuccess, nil
}

// deny answers cl's CONNECT with code and stops it, counted and logged
// (at most once per 10 s per reason): mochi then ends the connection
// without taking the id's session or client over (FERRY.md, refuse).
func (h *sessionHook) deny(cl *mqtt.Client, code packets.Code, err error) {
	reason := "owner"
	if errors.Is(err, ErrSessionQuota) {
		reason = "quota"
	}
	h.metrics.denied.WithLabelValues(reason).Inc()
	h.logs.Warn("deny:"+reason, "connection refused", "client", cl.ID, "username", string(cl.Properties.Username),
		"reason", fmt.Sprintf("0x%02x", code.Code), "err", err)
	_ = h.server.SendConnack(cl, code, false, nil)
	cl.Stop(err)
}
