package bridge

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// mosquittoStorm runs the reconnect storm of BenchmarkResumeStorm against
// Mosquitto (the Debian package, sessions in memory, one process) with the
// same clients and clock, for the side-by-side figure: n sessions of
// stormGroup subscribe, their connections close (Mosquitto keeps their
// sessions; it is not killed, as it could not resume them then), a
// publisher sends stormGroup QoS 1 messages to each group, and every
// client reconnects at once. It returns the first message p99 from the
// CONNECT, in seconds, and fails b as the Ferry run does (a session not
// present, a message lost or out of order).
func mosquittoStorm(b *testing.B, n int) float64 {
	bin, err := exec.LookPath("mosquitto")
	if err != nil {
		bin = "/usr/sbin/mosquitto"
	}
	if _, err := os.Stat(bin); err != nil {
		b.Fatalf("FERRY_BENCH_MOSQUITTO: mosquitto not installed (apt-get install -y mosquitto): %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, port, _ := net.SplitHostPort(addr)
	dir := b.TempDir()
	conf := filepath.Join(dir, "mosquitto.conf")
	// The window of a Ferry replay to an MQTT 3.1.1 client (64,
	// session.replayWindowV3)
	// and room for every queued message.
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("listener %s 127.0.0.1\nallow_anonymous true\npersistence false\n"+
		"max_inflight_messages %d\nmax_queued_messages %d\n", port, 64, 10*stormGroup)), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", conf)
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		b.Fatalf("start mosquitto: %v", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	waitFor(b, 10*time.Second, "mosquitto listening", func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})

	run := randHex(3)
	groups := (n + stormGroup - 1) / stormGroup
	id := func(i int) string { return fmt.Sprintf("ms%s-%d", run, i) }
	topic := func(g int) string { return fmt.Sprintf("ms%s/g%d/m", run, g) }
	conns := make([]*lightClient, n)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.close()
			}
		}
	}()
	stormSubscribe(b, addr, conns, id, func(g int) string { return fmt.Sprintf("ms%s/g%d/#", run, g) })
	for i, c := range conns {
		c.close()
		conns[i] = nil
	}
	pub, err := dialLight(&net.Dialer{Timeout: 10 * time.Second}, addr, "ms"+run+"-pub", 4, 300)
	if err != nil {
		b.Fatal(err)
	}
	defer pub.close()
	stormPublish(b, pub, groups, topic)

	res, gate, wg := stormResumeAll(conns, id, func(int) string { return addr })
	waitQuiet(b, 0.1, 30*time.Second)
	start := time.Now()
	close(gate)
	wg.Wait()
	took := time.Since(start)
	var first []time.Duration
	for i, r := range res {
		if r.err != nil {
			b.Fatalf("mosquitto: session %s: %v", id(i), r.err)
		}
		first = append(first, r.first-r.sent)
	}
	p50, p99 := quantileSeconds(first, 0.5), quantileSeconds(first, 0.99)
	b.Logf("mosquitto: %d sessions resumed in %s: first message from the CONNECT p50/p99 %.2f/%.2f s", n, took.Round(time.Millisecond), p50, p99)
	return p99
}
