package bridge

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	pahov3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
	"github.com/ferry-bridge/ferry/topicmap"
)

// soakSize is the shape of one sessions soak.
type soakSize struct {
	sessions   int // persistent sessions, spread over the groups
	groups     int // a session of group k subscribes to <prefix>/g<k>/#
	publishers int // each publishes one stream per group: <prefix>/g<k>/p<j>
	perStream  int // messages per stream
	rate       int // messages per second per publisher (an upper bound)
}

func (s soakSize) messages() int { return s.publishers * s.groups * s.perStream }
func (s soakSize) publishing() float64 {
	return float64(s.groups*s.perStream) / float64(s.rate)
}

// soakSizeFor is the CI size, the full size (FERRY_SOAK_FULL=1, scripts/soak.sh
// sessions), or FERRY_SOAK_SIZE=sessions,groups,publishers,per-stream,rate.
func soakSizeFor(t *testing.T) soakSize {
	s := soakSize{sessions: 60, groups: 6, publishers: 3, perStream: 60, rate: 120}
	if fullSize() {
		s = soakSize{sessions: 1000, groups: 50, publishers: 6, perStream: 100, rate: 300}
	}
	if v := os.Getenv("FERRY_SOAK_SIZE"); v != "" {
		if _, err := fmt.Sscanf(v, "%d,%d,%d,%d,%d", &s.sessions, &s.groups, &s.publishers, &s.perStream, &s.rate); err != nil ||
			s.groups < 1 || s.sessions < s.groups || s.publishers < 3 || s.perStream < 1 || s.rate < 1 {
			t.Fatalf("FERRY_SOAK_SIZE=%q: want sessions (>= groups),groups (>= 1),publishers (>= 3),per-stream (>= 1),rate (>= 1): %v", v, err)
		}
	}
	return s
}

// soakSeed is FERRY_SOAK_SEED, or the time.
func soakSeed(t *testing.T) uint64 {
	if v := os.Getenv("FERRY_SOAK_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("FERRY_SOAK_SEED=%q: %v", v, err)
		}
		return seed
	}
	return uint64(time.Now().UnixNano())
}

// TestSessionsSoakKill9 (the state issue's soak): three cmd/bridge
// processes on one Kafka behind HAProxy; persistent sessions (MQTT 3.1.1
// clean session 0, every third one MQTT 5 with a session expiry) subscribe
// QoS 1 to their group's filter; QoS 1 publishers publish sequenced
// streams, one per group each, at a bounded rate. At a random moment during
// publishing (seeded: FERRY_SOAK_SEED repeats a run) one instance is killed
// with SIGKILL. Its sessions reconnect through HAProxy without subscribing
// and must get Session Present 1; its publishers reconnect through HAProxy
// and resend what was not acknowledged. It runs in two modes:
//
//   - reverse: every topic is a reverse topic of every instance, so every
//     instance delivers every message live. Sessions connect through
//     HAProxy, publishers straight to every instance. Every acknowledged
//     message must reach every session of its group.
//   - default: no reverse topics (the default configuration). An instance
//     delivers live only what its own publishers publish, and a session
//     gets what it missed when it resumes, from the replay of the forward
//     topics; what was published on another instance while a session was
//     connected is not promised. So every session and publisher connects
//     first to the victim (all deliveries local until the kill). A session
//     resumed after the kill must get every message of its group
//     acknowledged before it sent that resume's CONNECT; after publishing,
//     every session disconnects and resumes once more (through HAProxy),
//     and must then have every acknowledged message of its group: those
//     published after the kill on the other survivor come from that replay.
//
// In both, each stream's first arrivals must be in order (duplicates
// counted). FERRY_SOAK_SPREAD=1 spreads the default mode's sessions and
// publishers as the reverse mode's (soakSpread). The figures line gives the time from a resume's CONNACK to its
// first message, for the resumes after the kill that had messages pending.
// CI size by default; FERRY_SOAK_FULL=1 (scripts/soak.sh sessions) runs
// 1,000 sessions in each mode.
func TestSessionsSoakKill9(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	size := soakSizeFor(t)
	seed := soakSeed(t)
	t.Logf("seed %d (FERRY_SOAK_SEED=%d repeats this run's kill moments and victims)", seed, seed)
	if lim := raiseNoFile(t, uint64(4*size.sessions+4096)); lim < uint64(2*size.sessions+1024) {
		t.Fatalf("RLIMIT_NOFILE is %d: too low for %d sessions", lim, size.sessions)
	}
	for _, reverse := range []bool{true, false} {
		name := "default"
		if reverse {
			name = "reverse"
		}
		t.Run(name, func(t *testing.T) { sessionsSoak(t, brokers, size, seed, reverse) })
	}
}

// sessionsSoak is one mode of TestSessionsSoakKill9: reverse (every topic a
// reverse topic) or the default (none).
func sessionsSoak(t *testing.T, brokers string, size soakSize, seed uint64, reverse bool) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	mode := "default mode (no reverse topics)"
	if reverse {
		mode = "reverse mode (every topic a reverse topic)"
	}

	run := randHex(3)
	prefix := "ferrytest/soak" + run
	var ktopics []string
	for k := range size.groups {
		for j := range size.publishers {
			kt, err := topicmap.EncodeTopic(soakTopic(prefix, k, j))
			if err != nil {
				t.Fatal(err)
			}
			kafkatest.CreateTopic(t, brokers, kt, 1, nil)
			ktopics = append(ktopics, kt)
		}
	}
	var inst []*ferryProcess
	var backends []string
	for i := range 3 {
		// The default mode promises everything only to sessions whose
		// publishers moved once, at the kill (docs/sessions.md). A publish
		// that Kafka, slow in the storm that follows the kill, acknowledges
		// after kafka.ack_timeout disconnects its publisher (no PUBACK),
		// which then reconnects through HAProxy, maybe to the instance of
		// sessions that got nothing of its stream live since the kill: its
		// messages are then delivered there live, a session's position in
		// its partition moves past what it published on the instance before
		// (not promised), and a full-size run (1,000 sessions) lost one or
		// two messages so in 5-104 sessions. So the default mode waits for
		// Kafka longer than the storm lasts; the reverse mode (everything
		// live everywhere) keeps the 5 s.
		ackTimeout := "5s"
		if !reverse && !soakSpread() {
			ackTimeout = "60s"
		}
		env := []string{"FERRY_KAFKA_BROKERS=" + brokers,
			fmt.Sprintf("FERRY_INSTANCE_ID=soak%s-%d", run, i), "FERRY_KAFKA_ACK_TIMEOUT=" + ackTimeout}
		if reverse {
			env = append(env, "FERRY_REVERSE_TOPICS="+strings.Join(ktopics, ","), "FERRY_REVERSE_START_OFFSET=earliest")
		}
		p := startFerry(t, fmt.Sprintf("ferry-%d", i), "", env...)
		inst = append(inst, p)
		backends = append(backends, p.MQTTAddr)
	}
	lb := startHAProxy(t, backends)
	// The victim and the moment of the kill (in the nominal publishing time).
	victim := rng.IntN(3)
	at := time.Duration((0.1 + 0.7*rng.Float64()) * size.publishing() * float64(time.Second))
	// Where the sessions and the publishers connect first. Reverse: the
	// sessions through HAProxy, the publishers straight to every instance
	// (publisher j to instance j%3). Default: all of them straight to the
	// victim, where every delivery is local until the kill; reconnections
	// go through HAProxy in both.
	sessFirst := func(int) string { return lb.addr }
	pubFirst := func(j int) string { return inst[j%3].MQTTAddr }
	if !reverse && !soakSpread() {
		sessFirst = func(int) string { return inst[victim].MQTTAddr }
		pubFirst = sessFirst
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })

	// Sessions: connect (sessFirst) and subscribe, some at a time.
	acked := make([]atomic.Int64, size.groups) // acknowledged messages per group
	ackedAt := newSoakAcks(size)
	sessions := make([]*soakSession, size.sessions)
	ready := make(chan error, size.sessions)
	gate := make(chan struct{}, 16)
	for i := range sessions {
		s := &soakSession{id: fmt.Sprintf("soak%s-s%d", run, i), group: i % size.groups, v5: i%3 == 2,
			first: sessFirst(i), addr: lb.addr, acked: &acked[i%size.groups], hang: make(chan struct{}, 1)}
		s.filter = fmt.Sprintf("%s/g%d/#", prefix, s.group)
		sessions[i] = s
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.run(ctx, gate, ready)
		}()
	}
	for range sessions {
		select {
		case err := <-ready:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("sessions not subscribed within 60 s")
		}
	}

	// Publishers: the first connection straight to pubFirst, reconnections
	// through HAProxy.
	pubs := make([]*soakPublisher, size.publishers)
	pubErrs := make(chan error, size.publishers)
	start := time.Now()
	for j := range pubs {
		p := &soakPublisher{id: fmt.Sprintf("soak%s-p%d", run, j), j: j, prefix: prefix, size: size,
			first: pubFirst(j), lb: lb.addr, acked: acked, ackedAt: ackedAt, writePatience: 5 * time.Second, ackPatience: 15 * time.Second}
		if !reverse && !soakSpread() {
			p.writePatience, p.ackPatience = 65*time.Second, 65*time.Second
		}
		pubs[j] = p
		wg.Add(1)
		go func() {
			defer wg.Done()
			pubErrs <- p.run(ctx, start)
		}()
	}

	// The kill.
	time.Sleep(time.Until(start.Add(at)))
	inst[victim].kill9()
	killed := time.Since(start)
	var published int64
	for k := range acked {
		published += acked[k].Load()
	}
	t.Logf("killed instance %d (SIGKILL) %s after publishing started, %d of %d messages acknowledged by then",
		victim, killed.Round(time.Millisecond), published, size.messages())

	for range pubs {
		select {
		case err := <-pubErrs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(2*time.Minute + time.Duration(3*size.publishing()*float64(time.Second))):
			t.Fatal("publishers did not finish")
		}
	}
	pubTook := time.Since(start)

	deadline := 60 * time.Second
	if fullSize() {
		deadline = 10 * time.Minute
	}
	fig := soakFigures{mode: mode, size: size, seed: seed, victim: victim, killedAt: killed, published: pubTook}
	if !reverse {
		// The resumes after the kill: each brings what was acknowledged
		// before it (from the replay, whichever instance published it).
		resumed, short := 0, 0
		for end := time.Now().Add(deadline); ; time.Sleep(20 * time.Millisecond) {
			resumed, short = 0, 0
			for _, s := range sessions {
				if d, ok := s.lastResumeDialed(); ok {
					resumed++
					if len(s.missing(ackedAt, d, 1)) > 0 {
						short++
					}
				}
			}
			if short == 0 || time.Now().After(end) {
				break
			}
		}
		fig.resumeShort = short
		if short > 0 {
			bad := 0
			for _, s := range sessions {
				d, ok := s.lastResumeDialed()
				if !ok {
					continue
				}
				if miss := s.missing(ackedAt, d, 20); len(miss) > 0 {
					if bad++; bad <= 10 {
						t.Errorf("session %s (v5 %v, %d resumes) resumed after the kill and lacks messages acknowledged before it sent CONNECT: %s",
							s.id, s.v5, s.resumeCount(), strings.Join(miss, " "))
						logsAbout(t, inst, s.id+" ", 12)
					}
				}
			}
			t.Errorf("%s after publishing ended, %d of %d sessions resumed after the kill lack messages acknowledged before their resume",
				deadline, short, resumed)
		}
		// Every session resumes once more: after that it has everything.
		for _, s := range sessions {
			s.hang <- struct{}{}
		}
		for end := time.Now().Add(deadline); ; time.Sleep(20 * time.Millisecond) {
			left := 0
			for _, s := range sessions {
				if !s.finalResumed() {
					left++
				}
			}
			if left == 0 {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("%d of %d sessions not resumed again within %s", left, len(sessions), deadline)
			}
		}
	}

	// Every session has every acknowledged message of its group.
	want := size.publishers * size.perStream
	// On time out the checks below name what is missing.
	for end := time.Now().Add(deadline); ; time.Sleep(20 * time.Millisecond) {
		short := 0
		for _, s := range sessions {
			if s.distinctCount() < want {
				short++
			}
		}
		if short == 0 {
			break
		}
		if time.Now().After(end) {
			t.Errorf("%s after publishing ended, %d of %d sessions still miss acknowledged messages", deadline, short, len(sessions))
			break
		}
	}
	streams := make([][]string, size.groups)
	for k := range streams {
		for j := range size.publishers {
			streams[k] = append(streams[k], soakStream(k, j))
		}
	}
	bad := 0
	for _, s := range sessions {
		got := s.snapshot()
		dups, err := streamsInOrder(got, size.perStream, streams[s.group]...)
		if err != nil {
			bad++
			if bad <= 10 {
				t.Errorf("session %s (v5 %v, %d resumes): %v; its arrivals: %s", s.id, s.v5, s.resumeCount(), err, arrivalsOf(got, err))
				logsAbout(t, inst, s.id+" ", 12)
			}
		}
		fig.add(s, len(got), dups)
	}
	for k := range acked {
		fig.acked += int(acked[k].Load())
		fig.expected += int(acked[k].Load()) * (size.sessions/size.groups + boolInt(k < size.sessions%size.groups))
	}
	t.Logf("sessions soak: %s", fig)
	for _, s := range sessions {
		for _, e := range s.errors() {
			t.Errorf("session %s: %s", s.id, e)
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d sessions miss acknowledged messages or got them out of order", bad, len(sessions))
		// The default mode does not promise a publisher that moves to a
		// session's instance after publishing on another while the session
		// was connected there (docs/sessions.md): a publisher that
		// reconnected more than once, or split a message between two
		// connections, may have done that.
		for _, p := range pubs {
			t.Log(p.movesString())
		}
	}
	if fig.acked != size.messages() {
		t.Errorf("acknowledged %d of %d messages: publishers gave up", fig.acked, size.messages())
	}
	if fig.resumed == 0 {
		t.Errorf("no session was on the killed instance: HAProxy did not spread them")
	}
	if !reverse && !soakSpread() && fig.resumed != len(sessions) {
		t.Errorf("%d of %d sessions resumed after the kill: every one was on the killed instance", fig.resumed, len(sessions))
	}
}

// soakSpread (FERRY_SOAK_SPREAD=1) runs the default mode as the reverse
// mode runs: sessions first through HAProxy, publisher j first on
// instance j%3, a 5 s ack timeout; every acknowledged message must still
// reach every session of its group (reading on demand). Not the CI size's
// default: a run under the full suite's load (2026-12-08, seed
// 1796692069857287425) had a session resumed after the kill skip one
// message of a publisher on another instance (got 22 where 21 was next;
// it came with the next resume), which 11 runs of that seed alone, 8
// beside two busy loops and a full-size run did not repeat.
func soakSpread() bool { return os.Getenv("FERRY_SOAK_SPREAD") == "1" }

func soakTopic(prefix string, group, pub int) string {
	return fmt.Sprintf("%s/g%d/p%d", prefix, group, pub)
}

func soakStream(group, pub int) string { return fmt.Sprintf("g%dp%d", group, pub) }

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// soakAcks are the times the publishers read each message's PUBACK (zero:
// not acknowledged). Each publisher writes its own; they are read once the
// publishers have ended.
type soakAcks struct {
	perStream int
	at        [][]time.Time // [group][publisher*perStream+n]
}

func newSoakAcks(s soakSize) *soakAcks {
	a := &soakAcks{perStream: s.perStream, at: make([][]time.Time, s.groups)}
	for k := range a.at {
		a.at[k] = make([]time.Time, s.publishers*s.perStream)
	}
	return a
}

func (a *soakAcks) set(group, pub, n int, at time.Time) { a.at[group][pub*a.perStream+n] = at }

// soakFigures are the results of one sessions soak.
type soakFigures struct {
	mode                  string
	size                  soakSize
	seed                  uint64
	victim                int
	killedAt, published   time.Duration
	acked, expected       int
	delivered, dups       int
	resumed, v5           int
	dupsResumed           int // duplicates of the sessions resumed after the kill
	final                 int // sessions resumed again at the end (the default mode)
	finalDups             int // duplicates that came on those final resumes
	resumeShort           int // sessions resumed after the kill lacking what was acknowledged before (the default mode)
	firstAfter            latencies
	noneAfter, notPending int
}

func (f *soakFigures) add(s *soakSession, delivered, dups int) {
	f.delivered += delivered
	f.dups += dups
	if s.v5 {
		f.v5++
	}
	resumed, final := false, false
	for _, r := range s.resumeList() {
		if r.final {
			final = true
			continue
		}
		resumed = true
		switch {
		case !r.pending:
			f.notPending++
		case r.first.IsZero():
			f.noneAfter++
		default:
			f.firstAfter = append(f.firstAfter, max(0, r.first.Sub(r.connack)))
		}
	}
	if resumed {
		f.resumed++
		f.dupsResumed += dups
	}
	if final {
		f.final++
		s.mu.Lock()
		f.finalDups += s.finalDups
		s.mu.Unlock()
	}
}

func (f soakFigures) String() string {
	perResumed, perOther := 0.0, 0.0
	if f.resumed > 0 {
		perResumed = float64(f.dupsResumed) / float64(f.resumed)
	}
	if n := f.size.sessions - f.resumed; n > 0 {
		perOther = float64(f.dups-f.dupsResumed) / float64(n)
	}
	again := ""
	if f.final > 0 {
		again = fmt.Sprintf(", resumed after the kill lacking what was acknowledged before the resume %d, resumed again at the end %d (duplicates on those resumes %d)",
			f.resumeShort, f.final, f.finalDups)
	}
	return fmt.Sprintf("%s: %d sessions (%d MQTT 5), 3 instances, %d publishers, instance %d killed at %s (publishing took %s); "+
		"messages acknowledged %d, deliveries expected %d, delivered %d, duplicates %d, resumed sessions %d%s; "+
		"duplicates per session resumed after the kill %.1f, per other session %.1f; "+
		"reconnect CONNACK -> first redelivered message p50 %.1f ms p99 %.1f ms (n=%d; %d resumes had nothing pending, %d got nothing); seed %d",
		f.mode, f.size.sessions, f.v5, f.size.publishers, f.victim, f.killedAt.Round(time.Millisecond), f.published.Round(time.Millisecond),
		f.acked, f.expected, f.delivered, f.dups, f.resumed, again, perResumed, perOther,
		ms(f.firstAfter.pct(0.5)), ms(f.firstAfter.pct(0.99)), len(f.firstAfter), f.notPending, f.noneAfter, f.seed)
}

// soakSession is one persistent session's client: it connects to first,
// subscribes once, and after losing its connection reconnects through
// HAProxy (addr) without subscribing, expecting Session Present 1. A send
// on hang makes it disconnect (DISCONNECT) and resume once more: a final
// resume.
type soakSession struct {
	id, filter, addr string
	first            string // where it connects and subscribes (then addr)
	group            int
	v5               bool
	acked            *atomic.Int64 // acknowledged messages of its group so far
	hang             chan struct{}

	mu       sync.Mutex
	got      []string
	distinct map[string]bool
	resumes  []*soakResume
	// finalDups counts the arrivals on a final resume's connection that
	// had arrived before.
	finalDups int
	errs      []string
}

// soakResume is one reconnection of a session.
type soakResume struct {
	final   bool      // the resume after a hang (the default mode's last one)
	dialed  time.Time // before its CONNECT was sent
	connack time.Time // when the reconnect's CONNACK was read
	pending bool      // at CONNACK, messages acknowledged to publishers had not arrived before it
	first   time.Time // the first message that arrived on this connection
}

func (s *soakSession) add(payload string, r *soakResume) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, payload)
	if s.distinct == nil {
		s.distinct = map[string]bool{}
	}
	if r != nil && r.final && s.distinct[payload] {
		s.finalDups++
	}
	s.distinct[payload] = true
	if r != nil && r.first.IsZero() {
		r.first = now
	}
}

func (s *soakSession) fail(format string, a ...any) {
	s.mu.Lock()
	s.errs = append(s.errs, fmt.Sprintf(format, a...))
	s.mu.Unlock()
}

func (s *soakSession) distinctCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.distinct)
}

func (s *soakSession) snapshot() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

func (s *soakSession) errors() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.errs...)
}

func (s *soakSession) resumeCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.resumes)
}

// lastResumeDialed is when the session's last resume that was not a final
// one started connecting; false: none.
func (s *soakSession) lastResumeDialed() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.resumes) - 1; i >= 0; i-- {
		if !s.resumes[i].final {
			return s.resumes[i].dialed, true
		}
	}
	return time.Time{}, false
}

// finalResumed: a final resume has its CONNACK.
func (s *soakSession) finalResumed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.resumes {
		if r.final {
			return true
		}
	}
	return false
}

// missing lists (up to max) the messages of the session's group that were
// acknowledged before the time before and have not arrived.
func (s *soakSession) missing(acks *soakAcks, before time.Time, max int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for i, at := range acks.at[s.group] {
		if at.IsZero() || !at.Before(before) {
			continue
		}
		m := soakStream(s.group, i/acks.perStream) + "-" + strconv.Itoa(i%acks.perStream)
		if !s.distinct[m] {
			if out = append(out, m); len(out) >= max {
				break
			}
		}
	}
	return out
}

func (s *soakSession) resumeList() []soakResume {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]soakResume, len(s.resumes))
	for i, r := range s.resumes {
		out[i] = *r
	}
	return out
}

// run connects, subscribes (reporting to ready), and reconnects after every
// loss of the connection, and after a hang, until ctx ends.
func (s *soakSession) run(ctx context.Context, gate chan struct{}, ready chan<- error) {
	subscribed := false
	again := false // the next connection is a final resume
	for attempt := 0; ctx.Err() == nil; attempt++ {
		if attempt > 0 {
			select { // a device's back-off
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		gated := !subscribed || again
		if gated {
			gate <- struct{}{}
		}
		var r *soakResume
		before := s.distinctCount() // what arrived before this connection
		if subscribed {
			r = &soakResume{final: again, dialed: time.Now()}
		}
		lost, hangup, present, err := s.connect(ctx, r, !subscribed)
		if r != nil && err == nil {
			r.pending = int(s.acked.Load()) > before
		}
		if gated {
			<-gate
		}
		if err != nil {
			if !subscribed && attempt >= 20 {
				ready <- fmt.Errorf("session %s: %w", s.id, err)
				return
			}
			continue
		}
		if subscribed {
			s.mu.Lock()
			s.resumes = append(s.resumes, r)
			s.mu.Unlock()
			if !present {
				s.fail("resume %d: Session Present 0, want 1", s.resumeCount())
			}
			again = false
		} else {
			subscribed = true
			ready <- nil
		}
		select {
		case <-ctx.Done():
		case <-lost:
		case <-s.hang:
			hangup()
			again = true
		}
	}
}

// connect opens one connection (subscribing when sub), records the
// CONNACK's time in r, and returns a channel closed when it is lost and a
// function that disconnects it (DISCONNECT: the session stays).
func (s *soakSession) connect(ctx context.Context, r *soakResume, sub bool) (<-chan struct{}, func(), bool, error) {
	if s.v5 {
		return s.connectV5(ctx, r, sub)
	}
	lost := make(chan struct{})
	var once sync.Once
	addr := s.addr
	if sub {
		addr = s.first
	}
	cl := pahov3.NewClient(pahov3.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(s.id).
		SetCleanSession(false).SetAutoReconnect(false).SetConnectRetry(false).SetOrderMatters(true).
		SetKeepAlive(30 * time.Second).SetConnectTimeout(5 * time.Second).SetWriteTimeout(10 * time.Second).
		SetDefaultPublishHandler(func(_ pahov3.Client, m pahov3.Message) { s.add(string(m.Payload()), r) }).
		SetConnectionLostHandler(func(pahov3.Client, error) { once.Do(func() { close(lost) }) }))
	tok := cl.Connect()
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		cl.Disconnect(0)
		return nil, nil, false, fmt.Errorf("connect: %v", tok.Error())
	}
	if r != nil {
		r.connack = time.Now()
	}
	go func() {
		<-ctx.Done()
		cl.Disconnect(50)
	}()
	if sub {
		st := cl.Subscribe(s.filter, 1, nil)
		if !st.WaitTimeout(10*time.Second) || st.Error() != nil {
			cl.Disconnect(0)
			return nil, nil, false, fmt.Errorf("subscribe: %v", st.Error())
		}
		if q := st.(*pahov3.SubscribeToken).Result()[s.filter]; q != 1 {
			cl.Disconnect(0)
			return nil, nil, false, fmt.Errorf("subscribe: granted %#x", q)
		}
	}
	return lost, func() { cl.Disconnect(250) }, tok.(*pahov3.ConnectToken).SessionPresent(), nil
}

func (s *soakSession) connectV5(ctx context.Context, r *soakResume, sub bool) (<-chan struct{}, func(), bool, error) {
	addr := s.addr
	if sub {
		addr = s.first
	}
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, nil, false, err
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn, ClientID: s.id, PacketTimeout: 20 * time.Second,
		OnClientError: func(error) {}, OnServerDisconnect: func(*paho.Disconnect) {},
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			s.add(string(pr.Packet.Payload), r)
			return true, nil
		}}})
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ca, err := c.Connect(cctx, &paho.Connect{ClientID: s.id, KeepAlive: 30, CleanStart: false,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: ptr[uint32](3600)}})
	if err != nil || ca == nil || ca.ReasonCode != 0 {
		conn.Close()
		if err == nil && ca != nil {
			err = fmt.Errorf("connack %#x", ca.ReasonCode)
		}
		return nil, nil, false, fmt.Errorf("v5 connect: %w", err)
	}
	if r != nil {
		r.connack = time.Now()
	}
	go func() {
		select {
		case <-ctx.Done():
			_ = c.Disconnect(&paho.Disconnect{})
		case <-c.Done():
		}
	}()
	if sub {
		sa, err := c.Subscribe(cctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: s.filter, QoS: 1}}})
		if err != nil || len(sa.Reasons) != 1 || sa.Reasons[0] != 1 {
			conn.Close()
			return nil, nil, false, fmt.Errorf("v5 subscribe: %v %v", sa, err)
		}
	}
	return c.Done(), func() { _ = c.Disconnect(&paho.Disconnect{}) }, ca.SessionPresent, nil
}

// soakPublisher publishes stream <prefix>/g<k>/p<j> for every group k:
// message n of every stream, then n+1, at most size.rate a second. A
// message not acknowledged is resent after reconnecting (through HAProxy);
// the next message of a stream waits for the previous one's PUBACK, so a
// resend cannot overtake it.
type soakPublisher struct {
	id, prefix, first, lb string
	j                     int
	size                  soakSize
	acked                 []atomic.Int64 // per group
	ackedAt               *soakAcks
	// writePatience and ackPatience are how long a publish may wait to be
	// written and then for its PUBACK before the publisher gives up on the
	// connection and moves: in the default mode longer than the instances' kafka.ack_timeout
	// (60 s), as the check assumes one move, at the kill. With 5 s to write
	// and 15 s for the PUBACK, a publisher starved of CPU in the storm
	// after the kill moved a second time, in the middle of a message, and
	// a full-size run failed on what the default mode does not promise
	// (2026-12-06: 250 sessions of 13 groups lacking one message).
	writePatience, ackPatience time.Duration

	mu    sync.Mutex
	moves []string // why it connected again through HAProxy, each time
}

// moved notes why the publisher connects again (through HAProxy, perhaps
// to another instance than before: the default mode's check assumes one
// move, at the kill).
func (p *soakPublisher) moved(format string, a ...any) {
	p.mu.Lock()
	p.moves = append(p.moves, fmt.Sprintf(format, a...))
	p.mu.Unlock()
}

// movesString lists the publisher's reconnects.
func (p *soakPublisher) movesString() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("%s: %d reconnects [%s]", p.id, len(p.moves), strings.Join(p.moves, "; "))
}

func (p *soakPublisher) run(ctx context.Context, start time.Time) error {
	g := p.size.groups
	interval := time.Duration(float64(g) / float64(p.size.rate) * float64(time.Second))
	var cl pahov3.Client
	defer func() {
		if cl != nil {
			cl.Disconnect(50)
		}
	}()
	addr := p.first
	for n := 0; n < p.size.perStream; n++ {
		if d := time.Until(start.Add(time.Duration(n) * interval)); d > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(d):
			}
		}
		left := make([]int, g) // groups whose message n is not acknowledged yet
		for k := range left {
			left[k] = k
		}
		for attempt := 0; len(left) > 0; attempt++ {
			if ctx.Err() != nil || attempt > 100 {
				return fmt.Errorf("publisher %s: message %d of %d streams not acknowledged after %d attempts", p.id, n, len(left), attempt)
			}
			if cl == nil || !cl.IsConnectionOpen() {
				if cl != nil {
					p.moved("before message %d: connection closed", n)
					cl.Disconnect(0)
					addr = p.lb
					time.Sleep(100 * time.Millisecond)
				}
				cl = pahov3.NewClient(pahov3.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(p.id).
					SetCleanSession(true).SetAutoReconnect(false).SetConnectRetry(false).SetOrderMatters(false).
					SetConnectTimeout(3 * time.Second).SetWriteTimeout(p.writePatience))
				if tok := cl.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
					continue
				}
			}
			toks := make([]pahov3.Token, len(left))
			for i, k := range left {
				toks[i] = cl.Publish(soakTopic(p.prefix, k, p.j), 1, false, soakStream(k, p.j)+"-"+strconv.Itoa(n))
			}
			var still []int
			var why error
			for i, tok := range toks {
				if tok.WaitTimeout(p.ackPatience) && tok.Error() == nil {
					p.ackedAt.set(left[i], p.j, n, time.Now())
					p.acked[left[i]].Add(1)
				} else {
					still = append(still, left[i])
					if why = tok.Error(); why == nil {
						why = fmt.Errorf("no PUBACK within %s", p.ackPatience)
					}
				}
			}
			if len(still) > 0 && len(still) < len(left) {
				// Some of message n went out on this connection and some
				// goes out on the next: if that is another instance, the
				// default mode's sessions here may lose the first part.
				p.moved("message %d: %d of %d publishes acknowledged, the rest not (%v)", n, len(left)-len(still), len(left), why)
			}
			left = still
			if len(left) > 0 {
				cl.Disconnect(0)
			}
		}
	}
	return nil
}

// arrivalsOf lists the arrivals of the stream an error of streamsInOrder
// names (at most 200).
func arrivalsOf(got []string, err error) string {
	var st string
	if _, e := fmt.Sscanf(err.Error(), "stream %s", &st); e != nil {
		return "?"
	}
	st = strings.TrimSuffix(st, ":")
	var out []string
	for _, p := range got {
		if strings.HasPrefix(p, st+"-") && len(out) < 200 {
			out = append(out, strings.TrimPrefix(p, st+"-"))
		}
	}
	return strings.Join(out, " ")
}

// logsAbout prints up to max lines of each instance's log that mention
// what (a client id): a failed session's replays, takeovers and errors.
// FERRY_TEST_BRIDGE_ENV=FERRY_LOG_LEVEL=debug adds each replay's summary.
func logsAbout(t *testing.T, inst []*ferryProcess, what string, max int) {
	t.Helper()
	for _, p := range inst {
		n := 0
		for _, line := range strings.Split(p.stderr.String(), "\n") {
			if strings.Contains(line+" ", what) && n < max {
				t.Logf("  %s: %s", p.name, line)
				n++
			}
		}
	}
}
