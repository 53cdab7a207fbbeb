package kafkatest

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-bridge/ferry/internal/testhelp"
)

// Spares are dedicated brokers started in the background when a test binary
// starts (StartSpares in TestMain), so that a fault test's StartBroker finds
// one up instead of waiting 5-30 s for a JVM: their start overlaps the
// tests before them, which mostly wait on the network.
type Spares struct {
	mu       sync.Mutex
	pending  []*spare
	clusters []*spare
	closed   chan struct{} // Close: spares not started yet never start
}

// spare is one broker being started; ready is closed once up (or failed).
type spare struct {
	b     *Broker
	err   error
	took  time.Duration
	ready chan struct{}
}

// spares is the test binary's pool: TestMain's, read by StartBroker. A test
// binary is one process and TestMain runs once, before any test.
var spares *Spares

// StartSpares starts n dedicated brokers in the background for the test
// binary's StartBroker calls (n: how many of its tests call it). Call it
// from TestMain before m.Run and Close the result after: unused spares are
// stopped. FERRY_TEST_SPARES=0 turns it off (each StartBroker starts its
// own, as before).
func StartSpares(n int) *Spares { return startSpares(n, 0) }

// startSpares starts clusters 3-node clusters, then n single brokers, one
// at a time (each start is one or three CPU-bound JVMs; the cluster tests
// come first in the bridge package).
func startSpares(n, clusters int) *Spares {
	s := &Spares{closed: make(chan struct{})}
	if os.Getenv("FERRY_TEST_SPARES") == "0" || os.Getenv(EnvVar) == "" {
		return s
	}
	var all []*spare
	for i := range clusters + n {
		sp := &spare{ready: make(chan struct{})}
		if i < clusters {
			s.clusters = append(s.clusters, sp)
		} else {
			s.pending = append(s.pending, sp)
		}
		all = append(all, sp)
	}
	go func() {
		for i, sp := range all {
			select {
			case <-s.closed:
				sp.err = errors.New("not started: the tests are over")
				close(sp.ready)
				continue
			default:
			}
			nodes := 0
			if i < clusters {
				nodes = 3
			}
			sp.start(nodes)
		}
	}()
	spares = s
	return s
}

func (sp *spare) start(nodes int) {
	defer close(sp.ready)
	start := time.Now()
	var b *Broker
	var err error
	if nodes > 0 {
		b, err = newCluster(nodes)
	} else {
		// Ports of its own: kafka.sh's defaults (9092/9093 if free) race
		// with the shared broker's start.
		if b, err = newBroker(""); err == nil {
			var ports []string
			if ports, err = freePorts(2); err == nil {
				b.env = append(b.env, "KAFKA_PORT="+ports[0], "KAFKA_CONTROLLER_PORT="+ports[1])
			}
		}
	}
	if err == nil {
		var out string
		if out, err = b.exec("up"); err == nil {
			b.Addr = lastLine(out)
		}
	}
	sp.b, sp.err, sp.took = b, err, time.Since(start)
}

// StartSparesFor starts a spare for each of tests (the names of the test
// binary's tests that call StartBroker) that the -test.run pattern selects:
// a run of a few other tests starts none. Call flag.Parse first.
func StartSparesFor(brokerTests, clusterTests []string) *Spares {
	return startSpares(selected(brokerTests), selected(clusterTests))
}

// selected counts the tests the -test.run pattern selects (all without one).
func selected(tests []string) int {
	if l := flag.Lookup("test.list"); l != nil && l.Value.String() != "" {
		return 0 // go test -list runs no test
	}
	f := flag.Lookup("test.run")
	if f == nil || f.Value.String() == "" {
		return len(tests)
	}
	top, _, _ := strings.Cut(f.Value.String(), "/")
	re, err := regexp.Compile(top)
	if err != nil {
		return 0
	}
	n := 0
	for _, t := range tests {
		if re.MatchString(t) {
			n++
		}
	}
	return n
}

// take returns the next spare broker, or cluster, once it is up (nil: none
// left, or it failed).
func (s *Spares) take(tb testing.TB, cluster bool) *Broker {
	s.mu.Lock()
	q := &s.pending
	if cluster {
		q = &s.clusters
	}
	if len(*q) == 0 {
		s.mu.Unlock()
		return nil
	}
	sp := (*q)[0]
	*q = (*q)[1:]
	s.mu.Unlock()
	waited := time.Now()
	<-sp.ready
	if sp.err != nil {
		tb.Logf("kafkatest: a spare broker did not start (%v): starting one", sp.err)
		if sp.b != nil {
			_ = sp.b.stop()
			os.RemoveAll(sp.b.state)
		}
		return nil
	}
	sp.b.own(tb)
	tb.Logf("dedicated kafka (a spare, up in %s; waited %s) at %s", sp.took.Round(100*time.Millisecond),
		time.Since(waited).Round(100*time.Millisecond), sp.b.Addr)
	return sp.b
}

// Close stops the spares no test took.
func (s *Spares) Close() error {
	s.mu.Lock()
	left := append(s.pending, s.clusters...)
	s.pending, s.clusters = nil, nil
	s.mu.Unlock()
	close(s.closed)
	var errs []error
	for _, sp := range left {
		<-sp.ready
		if sp.b == nil {
			continue
		}
		if err := sp.b.stop(); err != nil {
			errs = append(errs, err)
		}
		os.RemoveAll(sp.b.state)
	}
	if len(errs) > 0 {
		return fmt.Errorf("kafkatest: stopping spares: %v", errs)
	}
	return nil
}

func takeSpare(tb testing.TB) *Broker {
	if spares == nil {
		return nil
	}
	return spares.take(tb, false)
}

func takeSpareCluster(tb testing.TB, nodes int) *Broker {
	if spares == nil || nodes != 3 {
		return nil
	}
	return spares.take(tb, true)
}

// freePorts returns n distinct ports free on 127.0.0.1 now (below the
// ephemeral range: testhelp.FreeAddrs).
func freePorts(n int) ([]string, error) {
	addrs, err := testhelp.FreeAddrs(n)
	var out []string
	for _, a := range addrs {
		_, port, _ := net.SplitHostPort(a)
		out = append(out, port)
	}
	return out, err
}
