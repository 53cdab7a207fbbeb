// Package mqttconn wraps the MQTT listeners' connections: a deadline on
// every write (a subscriber that stops reading is cut off instead of
// blocking everyone who publishes to it), corking (many writes, one system
// call), coalesced deadlines (mochi moves the keep-alive deadline before
// every packet it reads), and a graceful close (half-close, then linger).
package mqttconn

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mochi-mqtt/server/v2/listeners"

	"github.com/ferry-bridge/ferry/internal/stack"
)

// Listener wraps a mochi listener so that every connection it
// establishes gets a write deadline (mqtt.write_timeout) before each write.
// mochi holds the client's lock while it writes, and every QoS>0 delivery
// to that client (NextPacketID) takes the same lock: without a bound, a
// subscriber that stops reading its socket blocks everyone who publishes to
// its topics — the reverse path, local delivery of forwarded messages,
// other clients — until its keepalive deadline (1.5 x keepalive, often
// minutes). With it, a stuck subscriber is disconnected after this long,
// like a NATS slow consumer; messages its queue could not take meanwhile
// are dropped and counted (ferry_mqtt_subscriber_drops_total).
type Listener struct {
	listeners.Listener
	Timeout time.Duration // mqtt.write_timeout
}

func (l *Listener) Serve(establish listeners.EstablishFn) {
	l.Listener.Serve(func(id string, c net.Conn) error {
		stack.Grow() // the connection's goroutine, before it goes deep
		return establish(id, &Conn{Conn: c, timeout: l.Timeout})
	})
}

// mqttCloseLinger bounds how long a connection Ferry closes keeps reading
// (and discarding) after it has half-closed (see Conn.Close).
const mqttCloseLinger = time.Second

// Conn also corks: between cork and uncork, writes (mochi's and
// the acknowledgement queue's) are collected in order and leave with one
// system call at uncork. And it closes gracefully (Close).
type Conn struct {
	net.Conn
	timeout   time.Duration
	lingerFor time.Duration // 0: mqttCloseLinger

	mu      sync.Mutex // writes; corked, held, wclosed
	corked  bool
	held    []byte
	wclosed bool // half-closed: nothing more is written

	wdl time.Time // the write deadline set on Conn (under mu)

	rmu       sync.Mutex // held by Read while it is in the kernel
	dmu       sync.Mutex // orders deadline changes with closing; rdl
	rdl       time.Time  // the read deadline set on Conn (zero: none)
	closing   atomic.Bool
	closeOnce sync.Once
}

func (c *Conn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.wclosed {
		return 0, net.ErrClosed
	}
	if c.corked {
		c.held = append(c.held, b...)
		return len(b), nil
	}
	return c.write(b)
}

func (c *Conn) cork() {
	c.mu.Lock()
	c.corked = true
	c.mu.Unlock()
}

// Cork and Uncork are cork and uncork for the bridge's acknowledgement
// queue (a batch of PUBACKs) and the session engine's replays (each
// fetch's deliveries).
func (c *Conn) Cork()   { c.cork() }
func (c *Conn) Uncork() { c.uncork() }

// uncork writes what was held. A write error closes the connection (see
// write), which ends the session; the writers that were told success are
// mochi's (for an ending connection) and the acknowledgement queue.
func (c *Conn) uncork() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = false
	c.flushHeld()
}

// flushHeld writes the held bytes; c.mu is held.
func (c *Conn) flushHeld() {
	if len(c.held) > 0 && !c.wclosed {
		_, _ = c.write(c.held)
	}
	if cap(c.held) > 64<<10 {
		c.held = nil // do not keep a burst's buffer per connection
	}
	c.held = c.held[:0]
}

// Deadlines are coalesced. mochi sets the connection's deadline before
// every packet it reads (1.5 x keep alive), and each write sets the write
// deadline: each is a timer update in Go's network poller, two or three per
// message on the forward path's hot loop. The deadline on the socket is
// moved only when a request passes it, and then a little further (a
// sixteenth of the period, at most deadlineSlack): a connection is cut
// never earlier than asked and at most that much later.
const deadlineSlack = time.Second

// coalesce returns the deadline to set for a request of t (made at now), and
// whether the one set (cur) already serves it.
func coalesce(cur, t, now time.Time) (time.Time, bool) {
	if !cur.Before(t) && !cur.IsZero() {
		slack := min(t.Sub(now)/16, deadlineSlack)
		if !cur.After(t.Add(slack)) {
			return cur, true
		}
		return t, false // asked for earlier than the slack allows: exactly
	}
	return t.Add(min(t.Sub(now)/16, deadlineSlack)), false
}

func (c *Conn) write(b []byte) (int, error) {
	now := time.Now()
	if dl, ok := coalesce(c.wdl, now.Add(c.timeout), now); !ok {
		if err := c.Conn.SetWriteDeadline(dl); err != nil {
			return 0, err
		}
		c.wdl = dl
	}
	n, err := c.Conn.Write(b)
	if err != nil {
		// mochi's write loop only logs write errors: close the connection
		// so that the read loop ends the session now.
		_ = c.Conn.Close()
	}
	return n, err
}

// Read fails once the connection is closing: whatever the client sends
// after that is discarded.
func (c *Conn) Read(b []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.closing.Load() {
		return 0, net.ErrClosed
	}
	n, err := c.Conn.Read(b)
	if c.closing.Load() {
		return 0, net.ErrClosed
	}
	return n, err
}

// SetDeadline and SetReadDeadline are mochi's keepalive deadline, refreshed
// before each read: ignored once closing, so that they cannot revive a
// reader that Close has woken. Both set only the read deadline (coalesced):
// every write sets its own deadline (write).
func (c *Conn) SetDeadline(t time.Time) error { return c.SetReadDeadline(t) }

func (c *Conn) SetReadDeadline(t time.Time) error {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	if c.closing.Load() {
		return nil
	}
	if t.IsZero() { // no keep alive: no deadline
		if c.rdl.IsZero() {
			return nil
		}
		c.rdl = time.Time{}
		return c.Conn.SetReadDeadline(t)
	}
	dl, ok := coalesce(c.rdl, t, time.Now())
	if ok {
		return nil
	}
	c.rdl = dl
	return c.Conn.SetReadDeadline(dl)
}

// Close closes gracefully. Closing a socket whose receive buffer holds
// unread bytes makes the kernel send RST instead of FIN, and a client still
// writing (a PUBREL after a PUBREC, publishes pipelined behind one that got
// DISCONNECT 0x93) may then get ECONNRESET before it has read the
// DISCONNECT Ferry just wrote. So Close wakes mochi's reader at once (it
// ends the session as before), and a goroutine of its own writes what is
// still held, half-closes (FIN after the last byte), reads and discards
// until the client closes or for mqttCloseLinger at most, then closes. A
// connection that cannot half-close (WebSocket) is closed at once.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.dmu.Lock()
		c.closing.Store(true)
		// A deadline in the past wakes a Read blocked in the kernel.
		_ = c.Conn.SetReadDeadline(time.Unix(1, 0))
		c.dmu.Unlock()
		if _, ok := c.Conn.(interface{ CloseWrite() error }); !ok {
			c.mu.Lock()
			c.wclosed = true
			c.mu.Unlock()
			_ = c.Conn.Close()
			return
		}
		go c.lingerAndClose()
	})
	return nil
}

func (c *Conn) lingerAndClose() {
	c.mu.Lock() // after a write in progress (bounded by the write timeout)
	c.flushHeld()
	c.corked, c.wclosed = false, true
	err := c.Conn.(interface{ CloseWrite() error }).CloseWrite()
	c.mu.Unlock()
	if err != nil { // e.g. TLS before its handshake completed
		_ = c.Conn.Close()
		return
	}
	linger := c.lingerFor
	if linger <= 0 {
		linger = mqttCloseLinger
	}
	// Once no Read is in the kernel (the past deadline woke it), every
	// later Read sees closing and leaves: the connection and its deadline
	// are ours.
	c.rmu.Lock()
	_ = c.Conn.SetReadDeadline(time.Now().Add(linger))
	c.rmu.Unlock()
	buf := make([]byte, 512)
	for range 1 << 20 { // bounded by the deadline; the count is a backstop
		if _, err := c.Conn.Read(buf); err != nil {
			break
		}
	}
	_ = c.Conn.Close()
}
