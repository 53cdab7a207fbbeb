package backend

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ferry-bridge/ferry/admin"
	"github.com/ferry-bridge/ferry/instance"
)

// Fleet is the live instances as their heartbeats say (the admin API's
// GET /api/v1/instances): every instance reads every heartbeat.
type Fleet struct {
	sessions string        // this cluster's state.sessions_topic
	lapse    time.Duration // state.instance_lapse: unheard this long, gone

	mu    sync.Mutex
	beats map[string]fleetBeat
}

type fleetBeat struct {
	hb instance.Heartbeat
	at time.Time // when read
}

// NewFleet is an empty fleet of the cluster of sessions (its
// state.sessions_topic) whose members lapse after lapse
// (state.instance_lapse).
func NewFleet(sessions string, lapse time.Duration) *Fleet {
	return &Fleet{sessions: sessions, lapse: lapse, beats: make(map[string]fleetBeat)}
}

// Saw records one heartbeat read.
func (f *Fleet) Saw(id string, hb instance.Heartbeat) {
	if hb.Sessions != "" && hb.Sessions != f.sessions {
		return // another cluster sharing the Kafka
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if cur, ok := f.beats[id]; ok && cur.hb.Nonce != hb.Nonce && cur.hb.Started.After(hb.Started) {
		return // a duplicate's older run: the newest one is shown
	}
	f.beats[id] = fleetBeat{hb: hb, at: time.Now()}
}

// live lists the instances heard from within the lapse and not stopped,
// by id.
func (f *Fleet) live() []admin.Instance {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	out := []admin.Instance{}
	for id, b := range f.beats {
		if b.hb.Stopped || now.Sub(b.at) > f.lapse {
			continue
		}
		out = append(out, admin.Instance{ID: id, Host: b.hb.Host, PID: b.hb.PID, HTTP: b.hb.HTTP, MQTT: b.hb.MQTT,
			Started: b.hb.Started, Clients: b.hb.Clients, Version: b.hb.Version, LastSeen: b.at})
	}
	slices.SortFunc(out, func(a, b admin.Instance) int { return strings.Compare(a.ID, b.ID) })
	return out
}
