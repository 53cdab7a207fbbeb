package bridge

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ferry-bridge/ferry/admin"
)

// liveInstances is the live instances as their heartbeats say (the admin API's
// GET /api/v1/instances): every instance reads every heartbeat.
type liveInstances struct {
	sessions string        // this cluster's state.sessions_topic
	lapse    time.Duration // state.instance_lapse: unheard this long, gone

	mu    sync.Mutex
	beats map[string]fleetBeat
}

type fleetBeat struct {
	hb heartbeat
	at time.Time // when read
}

func newLiveInstances(sessions string, lapse time.Duration) *liveInstances {
	return &liveInstances{sessions: sessions, lapse: lapse, beats: make(map[string]fleetBeat)}
}

// saw records one heartbeat read.
func (f *liveInstances) saw(id string, hb heartbeat) {
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
func (f *liveInstances) live() []admin.Instance {
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
