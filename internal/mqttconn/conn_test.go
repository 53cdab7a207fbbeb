package mqttconn

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// TestCorkedWritesLeaveTogether: between cork and uncork, writes return at
// once and are held in order; uncork sends them with one write.
func TestCorkedWritesLeaveTogether(t *testing.T) {
	server, client := net.Pipe() // a write blocks until the other end reads
	defer server.Close()
	defer client.Close()
	c := &Conn{Conn: server, timeout: 5 * time.Second}
	c.cork()
	wrote := make(chan error, 1)
	go func() {
		for _, s := range []string{"ab", "cd", "ef"} {
			if _, err := c.Write([]byte(s)); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- nil
	}()
	select { // no reader yet: corked writes must not block
	case err := <-wrote:
		if err != nil {
			t.Fatalf("corked write: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("corked writes blocked: they went to the connection")
	}
	done := make(chan struct{})
	go func() { defer close(done); c.uncork() }()
	_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 16)
	n, err := client.Read(buf) // net.Pipe delivers one Write per Read
	if err != nil || string(buf[:n]) != "abcdef" {
		t.Fatalf("first read after uncork = %q, %v; want all held bytes in one write", buf[:n], err)
	}
	<-done
	// Uncorked again: a write goes straight through.
	go func() { _, _ = c.Write([]byte("gh")) }()
	if _, err := io.ReadFull(client, buf[:2]); err != nil || string(buf[:2]) != "gh" {
		t.Fatalf("uncorked write: %q, %v", buf[:2], err)
	}
}

// TestCloseHalfClosesAndWakesReader: Close wakes a Read blocked on the
// connection at once (the session ends as before, shutdown is not held up
// by the linger), writes what was corked, then half-closes: the client
// reads everything and then EOF, and may go on writing without a reset
// while the server lingers (here a minute, so that only the half-close can
// have ended the client's read).
func TestCloseHalfClosesAndWakesReader(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	c := &Conn{Conn: server, timeout: 5 * time.Second, lingerFor: time.Minute}
	readErr := make(chan error, 1)
	go func() { // mochi's reader: reads until an error
		buf := make([]byte, 16)
		for {
			if _, err := c.Read(buf); err != nil {
				readErr <- err
				return
			}
		}
	}()
	if _, err := c.Write([]byte("before-")); err != nil {
		t.Fatal(err)
	}
	c.cork()
	if _, err := c.Write([]byte("disconnect")); err != nil {
		t.Fatal(err)
	}
	// Perhaps still unread at Close: a plain close would then send RST.
	if _, err := client.Write([]byte("pubrel")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(time.Hour)) // a keepalive refresh racing Close
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(time.Hour)) // ignored once closing
	select {
	case err := <-readErr:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("blocked Read after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not wake the blocked Read")
	}
	_ = client.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, err := io.ReadAll(client)
	if err != nil || string(got) != "before-disconnect" {
		t.Fatalf("client read %q, %v; want everything written then EOF", got, err)
	}
	for i := range 3 { // the server still reads: no reset
		if _, err := client.Write([]byte("late")); err != nil {
			t.Fatalf("client write %d after the half-close: %v", i, err)
		}
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close: %v, want net.ErrClosed", err)
	}
}

// deadlineConn records the deadlines set on it.
type deadlineConn struct {
	net.Conn
	reads, writes []time.Time
}

func (d *deadlineConn) Write(b []byte) (int, error) { return len(b), nil }
func (d *deadlineConn) SetReadDeadline(t time.Time) error {
	d.reads = append(d.reads, t)
	return nil
}
func (d *deadlineConn) SetWriteDeadline(t time.Time) error {
	d.writes = append(d.writes, t)
	return nil
}
func (d *deadlineConn) SetDeadline(time.Time) error {
	panic("SetDeadline reached the socket: it moves the write deadline behind write's back")
}

// TestDeadlinesCoalesced: mochi's deadline before every read and the write
// deadline before every write reach the socket about once per slack, not
// once per packet; the deadline on the socket is never earlier than asked
// and at most deadlineSlack later; an earlier request and "no deadline"
// are set exactly.
func TestDeadlinesCoalesced(t *testing.T) {
	d := &deadlineConn{}
	c := &Conn{Conn: d, timeout: 5 * time.Second}
	for range 10_000 {
		asked := time.Now().Add(90 * time.Second) // keep alive 60 s
		if err := c.SetDeadline(asked); err != nil {
			t.Fatal(err)
		}
		if got := d.reads[len(d.reads)-1]; got.Before(asked) || got.After(asked.Add(deadlineSlack)) {
			t.Fatalf("read deadline %v for a request of %v: want it in [asked, asked+%s]", got, asked, deadlineSlack)
		}
		before := time.Now()
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if got := d.writes[len(d.writes)-1]; got.Before(before.Add(c.timeout)) || got.After(time.Now().Add(c.timeout+deadlineSlack)) {
			t.Fatalf("write deadline %v for a write at %v: want it within [now+timeout, now+timeout+%s]", got, before, deadlineSlack)
		}
	}
	if len(d.reads) > 3 || len(d.writes) > 3 {
		t.Fatalf("10,000 packets set %d read and %d write deadlines on the socket, want about one each", len(d.reads), len(d.writes))
	}
	earlier := time.Now().Add(10 * time.Second)
	_ = c.SetReadDeadline(earlier)
	if got := d.reads[len(d.reads)-1]; got.Before(earlier) || got.After(earlier.Add(time.Second)) {
		t.Fatalf("a request for an earlier deadline %v set %v", earlier, got)
	}
	_ = c.SetDeadline(time.Time{})
	if got := d.reads[len(d.reads)-1]; !got.IsZero() {
		t.Fatalf("no deadline (keep alive 0) set %v, want none", got)
	}
}
