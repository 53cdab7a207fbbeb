package bridge

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Helpers for tests that run the real cmd/bridge binary as a child process:
// built without -race (memory figures of a race binary mean nothing), one
// process per Ferry instance so that SIGKILL really kills one instance.

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// bridgeBinary returns the path of a cmd/bridge binary: the one
// FERRY_TEST_BRIDGE_BIN names (scripts/test.sh builds it once for every
// test process), else one built here once per test binary run. Both are
// plain `go build`s, the same build as the README's `go run ./cmd/bridge`,
// so that one compilation serves all.
//
// With FERRY_TEST_BRIDGE_BIN_WAIT (a duration) the named binary may still be
// being built when the tests start (scripts/test.sh builds it beside the
// first tests that do not need it): the first caller waits that long for
// it to appear, or for the build's failure (the file named with ".failed"
// appended, holding the build's output).
func bridgeBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		if p := os.Getenv("FERRY_TEST_BRIDGE_BIN"); p != "" {
			binPath = p
			binErr = waitForBinary(p, os.Getenv("FERRY_TEST_BRIDGE_BIN_WAIT"))
			return
		}
		dir, err := os.MkdirTemp("", "ferry-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "ferry-bridge")
		cmd := exec.Command("go", "build", "-o", binPath, "../cmd/bridge")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build ./cmd/bridge: %w\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// waitForBinary waits up to wait (a time.ParseDuration string; "": not at
// all) for the binary at p, or for the failure of its build (p + ".failed").
func waitForBinary(p, wait string) error {
	var patience time.Duration
	if wait != "" {
		d, err := time.ParseDuration(wait)
		if err != nil {
			return fmt.Errorf("FERRY_TEST_BRIDGE_BIN_WAIT: %w", err)
		}
		patience = d
	}
	deadline := time.Now().Add(patience)
	for {
		_, err := os.Stat(p)
		if err == nil {
			return nil
		}
		if out, ferr := os.ReadFile(p + ".failed"); ferr == nil {
			return fmt.Errorf("FERRY_TEST_BRIDGE_BIN: the build of %s failed:\n%s", p, out)
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("FERRY_TEST_BRIDGE_BIN (waited %v): %w", patience, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ferryProcess is one cmd/bridge process.
type ferryProcess struct {
	t        testing.TB
	name     string
	config   string
	env      []string
	MQTTAddr string
	HTTPAddr string
	cmd      *exec.Cmd
	stderr   *lockedBuffer
	exited   chan struct{}
}

// startFerry starts cmd/bridge with an optional config file (path "" for
// none) and FERRY_* variables env (FERRY_MQTT_LISTEN and FERRY_HTTP_LISTEN
// are chosen here) and waits for /readyz.
func startFerry(t testing.TB, name, config string, env ...string) *ferryProcess {
	t.Helper()
	p := &ferryProcess{t: t, name: name, config: config, env: env, MQTTAddr: freeAddr(t), HTTPAddr: freeAddr(t)}
	p.start()
	t.Cleanup(p.stop)
	return p
}

func (p *ferryProcess) start() {
	p.t.Helper()
	p.cmd = exec.Command(bridgeBinary(p.t))
	if p.config != "" {
		p.cmd.Args = append(p.cmd.Args, "--config", p.config)
	}
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FERRY_") || strings.HasPrefix(kv, "FERRY_TEST") {
			env = append(env, kv)
		}
	}
	env = append(env, stateEnv(p.t)...)
	p.cmd.Env = append(env, append([]string{"FERRY_MQTT_LISTEN=" + p.MQTTAddr, "FERRY_HTTP_LISTEN=" + p.HTTPAddr,
		"FERRY_LOG_LEVEL=warn"}, p.env...)...)
	// FERRY_TEST_BRIDGE_ENV="FERRY_X=1 FERRY_Y=2" adds settings to every
	// cmd/bridge process (to measure a variant without editing the test).
	p.cmd.Env = append(p.cmd.Env, strings.Fields(os.Getenv("FERRY_TEST_BRIDGE_ENV"))...)
	p.stderr = &lockedBuffer{}
	p.cmd.Stdout, p.cmd.Stderr = io.Discard, p.stderr
	// FERRY_TEST_BRIDGE_LOGS=dir also writes each process's log to
	// dir/<name>-<random>.log (a soak's replays, read after the run).
	if dir := os.Getenv("FERRY_TEST_BRIDGE_LOGS"); dir != "" {
		f, err := os.CreateTemp(dir, p.name+"-*.log")
		if err != nil {
			p.t.Fatalf("FERRY_TEST_BRIDGE_LOGS: %v", err)
		}
		p.t.Cleanup(func() { f.Close() })
		p.cmd.Stderr = io.MultiWriter(p.stderr, f)
	}
	if err := p.cmd.Start(); err != nil {
		p.t.Fatalf("%s: %v", p.name, err)
	}
	p.exited = make(chan struct{})
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	// Generous: a start is not what these tests prove, and one at the
	// start of a full run shares the machine with spare Kafka JVMs starting.
	deadline := time.Now().Add(childReady)
	for !p.ready() {
		select {
		case <-p.exited:
			p.t.Fatalf("%s exited before it was ready:\n%s", p.name, p.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s not ready within %s:\n%s", p.name, childReady, p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *ferryProcess) ready() bool {
	res, err := http.Get("http://" + p.HTTPAddr + "/readyz")
	if err != nil {
		return false
	}
	res.Body.Close()
	return res.StatusCode == http.StatusOK
}

func (p *ferryProcess) pid() int { return p.cmd.Process.Pid }

// kill9 kills the process with SIGKILL and waits for it.
func (p *ferryProcess) kill9() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// stop ends the process with SIGTERM (SIGKILL after 20 s).
func (p *ferryProcess) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		p.kill9()
	}
}

// get fetches one HTTP path of the process.
func (p *ferryProcess) get(path string) (string, error) {
	res, err := http.Get("http://" + p.HTTPAddr + path)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", path, res.Status)
	}
	return string(b), err
}

// metric reads one series (exact name and label set as printed, e.g.
// `go_goroutines` or `ferry_dropped_total{reason="ring_full"}`); -1 if absent.
func (p *ferryProcess) metric(series string) float64 {
	body, err := p.get("/metrics")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// connectLights opens conns[from:to] to addr as idle MQTT 3.1.1 clients
// (ids prefix-N) with 64 dialers spread over source addresses 127.0.0.2-5
// (so that ephemeral ports never run out). It returns how long it took.
func connectLights(t testing.TB, addr, prefix string, conns []*lightClient, from, to int) time.Duration {
	t.Helper()
	return dialEach(t, 64, from, to, "clients failed to connect", func(d *net.Dialer, i int) error {
		c, err := dialLight(d, addr, fmt.Sprintf("%s-%d", prefix, i), 4, 300)
		if err == nil {
			conns[i] = c
		}
		return err
	})
}

// loadDialer is a load generator's dialer: connection i leaves from
// 127.0.0.(2+i%4) (a source address has 28,000 ports), and its local port
// is chosen at connect, from the whole 4-tuple (IP_BIND_ADDRESS_NO_PORT):
// chosen at bind, a port had to be free of every socket of the address,
// those in TIME_WAIT from a run a minute before too, and a run's dials got
// slower with each run before it.
func loadDialer(timeout time.Duration, i int) *net.Dialer {
	return &net.Dialer{Timeout: timeout, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%4))},
		Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
			}); err != nil {
				return err
			}
			return serr
		}}
}

// dialEach runs do for every index in [from, to) on workers goroutines, each
// with its own dialer on one of four loopback source addresses (so that
// thousands of connections do not run out of ephemeral ports), and returns
// the time it took; any failure fails tb ("N of M <what> (first: ...)").
func dialEach(tb testing.TB, workers, from, to int, what string, do func(d *net.Dialer, i int) error) time.Duration {
	tb.Helper()
	var next atomic.Int64
	next.Store(int64(from))
	var errs atomic.Int64
	var first atomic.Value
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := loadDialer(10*time.Second, w)
			for {
				i := int(next.Add(1) - 1)
				if i >= to {
					return
				}
				if err := do(d, i); err != nil {
					errs.Add(1)
					first.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if n := errs.Load(); n > 0 {
		tb.Fatalf("%d of %d %s (first: %v)", n, to-from, what, first.Load())
	}
	return took
}
