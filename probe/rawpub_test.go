package probe

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-bridge/ferry/internal/testhelp"
	"github.com/ferry-bridge/ferry/probe/stamp"
)

// windowBroker is a minimal MQTT server that checks the raw engine's
// window: it acknowledges nothing until `window` publishes are in flight,
// then makes sure no further publish arrives (the window is the limit),
// then acknowledges them all at once.
type windowBroker struct {
	ln       net.Listener
	window   int
	mu       sync.Mutex
	maxSeen  int
	overflow error
	got      int
	wg       sync.WaitGroup
}

func startWindowBroker(t *testing.T, window int) *windowBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &windowBroker{ln: ln, window: window}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				defer c.Close()
				b.serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		b.wg.Wait()
	})
	return b
}

func (b *windowBroker) url() string { return "tcp://" + b.ln.Addr().String() }

func (b *windowBroker) fail(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.overflow == nil {
		b.overflow = err
	}
}

func (b *windowBroker) serve(c net.Conn) {
	rd := packetReader{br: bufio.NewReader(c)}
	if p, err := rd.next(); err != nil || p.typ != pktConnect {
		b.fail(fmt.Errorf("first packet: %v %v", p.typ, err))
		return
	}
	if _, err := c.Write([]byte{pktConnack << 4, 2, 0, 0}); err != nil {
		return
	}
	var pending []uint16
	for {
		switch {
		case len(pending) == b.window:
			// Full: nothing more may arrive until we acknowledge.
			_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		case len(pending) > 0:
			// The client's last, partial window (or a client stalled by a
			// loaded machine: long enough that the window fills first).
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		default:
			_ = c.SetReadDeadline(time.Time{})
		}
		p, err := rd.next()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			var acks []byte
			for _, pid := range pending {
				a := ackPacket(pktPuback, pid)
				acks = append(acks, a[:]...)
			}
			pending = pending[:0]
			if _, err := c.Write(acks); err != nil {
				return
			}
			continue
		}
		if err != nil {
			return
		}
		switch p.typ {
		case pktPublish:
			_, pid, _, err := p.publish()
			if err != nil {
				b.fail(err)
				return
			}
			pending = append(pending, pid)
			b.mu.Lock()
			b.got++
			b.maxSeen = max(b.maxSeen, len(pending))
			if len(pending) > b.window {
				b.overflow = fmt.Errorf("%d publishes in flight, window %d", len(pending), b.window)
			}
			b.mu.Unlock()
		case pktDisconn:
			return
		}
	}
}

// TestRawWindowIsTheLimit: with --inflight N the raw engine keeps exactly
// up to N QoS 1 publishes unacknowledged per connection, never more, and
// the default (1) is the closed loop.
func TestRawWindowIsTheLimit(t *testing.T) {
	for _, window := range []int{1, 8} {
		t.Run(fmt.Sprintf("inflight=%d", window), func(t *testing.T) {
			b := startWindowBroker(t, window)
			cfg := DefaultConfig(MQTTToKafka)
			cfg.MQTT, cfg.AckOnly, cfg.QoS, cfg.Count, cfg.Clients = b.url(), true, 1, 40, 2
			if window > 1 {
				cfg.Inflight = window
			}
			res, err := run(t, MQTTToKafka, cfg)
			if err != nil {
				t.Fatal(err)
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.overflow != nil {
				t.Fatal(b.overflow)
			}
			if b.maxSeen != window || b.got != 40 {
				t.Fatalf("max in flight %d (want the window %d), publishes %d", b.maxSeen, window, b.got)
			}
			if r := row(t, res, MetricAck); r.Counts.Received != 40 || r.Counts.Lost() != 0 {
				t.Fatalf("ack row %+v", r)
			}
		})
	}
}

// TestRawEngineQoS runs the raw engine at every QoS against mochi (through
// kfake) and checks the join: everything arrives once, nothing reordered
// per publisher, every acknowledgement timed.
func TestRawEngineQoS(t *testing.T) {
	b := startBroker(t)
	brokers := startKfake(t, "_raw_qos")
	forwardMQTTToKafka(t, b, brokers, "/raw/qos", "_raw_qos", 0, passThrough)
	for qos := range 3 {
		t.Run(fmt.Sprintf("qos%d", qos), func(t *testing.T) {
			cfg := testConfig(MQTTToKafka, b, brokers)
			cfg.Topic, cfg.QoS, cfg.Clients, cfg.Inflight, cfg.Count = "/raw/qos", qos, 3, 16, 600
			res, err := run(t, MQTTToKafka, cfg)
			if err != nil {
				t.Fatal(err)
			}
			c := row(t, res, MetricE2E).Counts
			if c.Received != 600 || c.Lost() != 0 || c.Duplicated != 0 || c.Reordered != 0 {
				t.Fatalf("counts %+v", c)
			}
			checks := strings.Join(res.Checks, "\n")
			want := "raw MQTT 3.1.1 engine, 3 connections"
			if qos > 0 {
				want = "620 acknowledgements timed"
			}
			if !strings.Contains(checks, want) {
				t.Fatalf("self-check lacks %q:\n%s", want, checks)
			}
		})
	}
}

// TestRawEngineAgainstMosquitto: the raw engine completes QoS 1 and QoS 2
// handshakes (and QoS 0 acknowledged by PINGRESP) with a broker nobody here wrote (Mosquitto), in --ack-only
// mode (Mosquitto alone, the MQTT ceiling of the benchmark).
func TestRawEngineAgainstMosquitto(t *testing.T) {
	bin, err := exec.LookPath("mosquitto")
	if err != nil {
		bin, err = exec.LookPath("/usr/sbin/mosquitto") // Debian's place, off a user's PATH
	}
	if err != nil {
		t.Fatalf("mosquitto not installed (scripts/test.sh installs it): %v", err)
	}
	addr := testhelp.FreeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	conf := filepath.Join(t.TempDir(), "mosquitto.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "listener %s 127.0.0.1\nallow_anonymous true\n", port), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", conf)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("mosquitto not listening on %s: %v\n%s", addr, err, out.String())
		}
		time.Sleep(20 * time.Millisecond) // polling for the listener
	}
	for _, qos := range []int{0, 1, 2} {
		cfg := DefaultConfig(MQTTToKafka)
		cfg.MQTT, cfg.AckOnly, cfg.QoS, cfg.Count, cfg.Clients, cfg.Inflight = "tcp://"+addr, true, qos, 3000, 2, 20
		res, err := run(t, MQTTToKafka, cfg)
		if err != nil {
			t.Fatalf("qos %d: %v", qos, err)
		}
		if r := row(t, res, MetricAck); r.Counts.Received != 3000 || r.Counts.Duplicated != 0 || r.Counts.Reordered != 0 || !r.Available {
			t.Fatalf("qos %d: ack row %+v", qos, r)
		}
	}
}

// FuzzPacketReader feeds arbitrary bytes to the raw engine's packet reader
// (what a broker sends): it must return packets or errors, never panic or
// allocate beyond its limit.
func FuzzPacketReader(f *testing.F) {
	f.Add([]byte{pktPuback << 4, 2, 0, 1})
	f.Add([]byte{pktConnack << 4, 2, 0, 0, pktPubrec << 4, 2, 0, 7})
	f.Add(newPublishTemplate("/a/b", 1, make([]byte, stamp.Size)).pkt)
	f.Add([]byte{pktPublish << 4, 0xff, 0xff, 0xff, 0x7f})
	f.Add([]byte{pktPublish << 4, 0x80, 0x80, 0x80, 0x80, 0x01})
	f.Fuzz(func(t *testing.T, in []byte) {
		rd := packetReader{br: bufio.NewReader(bytes.NewReader(in))}
		for range 64 {
			p, err := rd.next()
			if err != nil {
				return
			}
			if len(p.body) > maxRawPacket {
				t.Fatalf("body %d beyond the limit", len(p.body))
			}
			_, _ = p.pid()
			if p.typ == pktPublish {
				_, _, _, _ = p.publish()
			}
		}
	})
}

func TestPublishTemplateRoundTrip(t *testing.T) {
	for _, size := range []int{stamp.Size, 200, 20000} {
		payload := make([]byte, size)
		tpl := newPublishTemplate("/x/y", 1, payload)
		stamp.Put(tpl.pkt[tpl.stampOff:], stamp.Stamp{Seq: 42, SentNs: 7})
		tpl.pkt[tpl.pidOff], tpl.pkt[tpl.pidOff+1] = 0x12, 0x34
		rd := packetReader{br: bufio.NewReader(bytes.NewReader(tpl.pkt))}
		p, err := rd.next()
		if err != nil {
			t.Fatal(err)
		}
		topic, pid, body, err := p.publish()
		if err != nil || topic != "/x/y" || pid != 0x1234 || len(body) != size || p.flags != 0x02 {
			t.Fatalf("size %d: topic %q pid %x body %d flags %x err %v", size, topic, pid, len(body), p.flags, err)
		}
		if st, _ := stamp.Parse(body); st.Seq != 42 || st.SentNs != 7 {
			t.Fatalf("stamp %+v", st)
		}
	}
}
