package bridge

import (
	"net"
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

type writeTimeoutConn struct {
	net.Conn
	timeout time.Duration
}

func (c *writeTimeoutConn) Write(b []byte) (int, error) {
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
