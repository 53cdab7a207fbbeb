package session

import (
	"sync"
	"sync/atomic"
)

// Injections maps an injecting client id to the coordinate of the message
// it is injecting now, and counts the replays running (while one runs, the
// forward path keeps every QoS 1 publish for local delivery: a resumed
// subscription may go live before its acknowledgement).
//
// mochi delivers an injected message on the injecting goroutine and calls
// OnQosPublish for each subscriber, which looks the coordinate up by the
// packet's origin: the client id, which is all mochi carries. Two
// injections under one id at once (a publisher's QoS 1 drainer and its
// QoS 2 read goroutine, or the drainer of its connection just taken over
// next to its new connection's) would read each other's coordinate, and a
// session acknowledging a message under the other one's coordinate moved
// its position past messages it never got. So the injections of one id
// take turns.
type Injections struct {
	mu        sync.Mutex
	m         map[string]*injecting
	replaying atomic.Int32
}

// injecting is one client id's injection slot.
type injecting struct {
	turn sync.Mutex               // held from begin to end
	at   atomic.Pointer[injected] // the message being injected; nil: none
	refs int                      // begins not yet ended, under injections.mu
}

// injected is the message an injection delivers: its coordinate and its
// MQTT topic.
type injected struct {
	c     Coord
	topic string
}

// Begin waits for origin's earlier injection to end, then registers the
// message at c, on MQTT topic mqttTopic ("": not told). Whoever injects a
// message read from or written to Kafka into the broker (the forward
// path's local delivery, the reverse path) calls it before mochi's
// InjectPacket or Publish, and End after it, on the same goroutine.
func (in *Injections) Begin(origin string, c Coord, mqttTopic string) {
	in.mu.Lock()
	if in.m == nil {
		in.m = map[string]*injecting{}
	}
	e := in.m[origin]
	if e == nil {
		e = &injecting{}
		in.m[origin] = e
	}
	e.refs++
	in.mu.Unlock()
	e.turn.Lock()
	e.at.Store(&injected{c: c, topic: mqttTopic})
}

// End ends origin's injection.
func (in *Injections) End(origin string) {
	in.mu.Lock()
	e := in.m[origin]
	if e == nil {
		in.mu.Unlock()
		return
	}
	e.refs--
	if e.refs == 0 {
		delete(in.m, origin)
	}
	in.mu.Unlock()
	e.at.Store(nil)
	e.turn.Unlock()
}

// Replaying reports whether a resumed session's replay runs on this
// instance: while one does, the forward path keeps every QoS 1 publish
// for local delivery (a resumed subscription may go live before its
// acknowledgement).
func (in *Injections) Replaying() bool { return in.replaying.Load() > 0 }

// of returns the coordinate origin is injecting now.
func (in *Injections) of(origin string) (Coord, bool) {
	m, ok := in.message(origin)
	return m.c, ok
}

// message returns the message origin is injecting now.
func (in *Injections) message(origin string) (injected, bool) {
	in.mu.Lock()
	e := in.m[origin]
	in.mu.Unlock()
	if e == nil {
		return injected{c: Coord{Offset: -1}}, false
	}
	if m := e.at.Load(); m != nil {
		return *m, true
	}
	return injected{c: Coord{Offset: -1}}, false
}
