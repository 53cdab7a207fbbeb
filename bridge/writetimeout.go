package bridge

import (
	"net"
	"sync"
	"time"

	"github.com/mochi-mqtt/server/v2/listeners"
)

// mqttWriteTimeout bounds one write to an MQTT client's socket. mochi holds
// the client's lock while it writes, and every QoS>0 delivery to that client
// (NextPacketID) takes the same lock: without a bound, a subscriber that
// stops reading its socket blocks everyone who publishes to its topics —
// the reverse path, local delivery of forwarded messages, other clients —
// until its keepalive deadline (1.5 x keepalive, often minutes). With it, a
// stuck subscriber is disconnected after this long, like a NATS slow
// consumer; messages its queue could not take meanwhile are dropped and
// counted (ferry_mqtt_subscriber_drops_total).
const mqttWriteTimeout = 10 * time.Second

// writeTimeoutListener wraps a mochi listener so that every connection it
// establishes gets a write deadline before each write.
type writeTimeoutListener struct {
	listeners.Listener
	timeout time.Duration
}

func (l *writeTimeoutListener) Serve(establish listeners.EstablishFn) {
	l.Listener.Serve(func(id string, c net.Conn) error {
		return establish(id, &writeTimeoutConn{Conn: c, timeout: l.timeout})
	})
}

// writeTimeoutConn also corks: between cork and uncork, writes (mochi's and
// the acknowledgement queue's) are collected in order and leave with one
// system call at uncork.
type writeTimeoutConn struct {
	net.Conn
	timeout time.Duration

	mu     sync.Mutex
	corked bool
	held   []byte
}

func (c *writeTimeoutConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.corked {
		c.held = append(c.held, b...)
		return len(b), nil
	}
	return c.write(b)
}

func (c *writeTimeoutConn) cork() {
	c.mu.Lock()
	c.corked = true
	c.mu.Unlock()
}

// uncork writes what was held. A write error closes the connection (see
// write), which ends the session; the writers that were told success are
// mochi's (for an ending connection) and the acknowledgement queue.
func (c *writeTimeoutConn) uncork() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = false
	if len(c.held) > 0 {
		_, _ = c.write(c.held)
	}
	if cap(c.held) > 64<<10 {
		c.held = nil // do not keep a burst's buffer per connection
	}
	c.held = c.held[:0]
}

func (c *writeTimeoutConn) write(b []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Write(b)
	if err != nil {
		// mochi's write loop only logs write errors: close the connection
		// so that the read loop ends the session now.
		_ = c.Conn.Close()
	}
	return n, err
}
