package probe

import (
	"bufio"
	"context"
	"fmt"
	"net"
	neturl "net/url"
	"sync"
	"sync/atomic"
	"time"
)

// rawBufSize is the raw engine's read and write buffer per connection: one
// write system call carries up to this many bytes of PUBLISH packets.
const rawBufSize = 64 << 10

// dialFunc opens the TCP connection to a broker.
type dialFunc func(ctx context.Context) (net.Conn, error)

// rawDialer returns how the raw engine reaches url: directly, or through
// the emulated link's relay.
func (r *runner) rawDialer(url string) (dialFunc, error) {
	u, err := neturl.Parse(url)
	if err != nil || (u.Scheme != "tcp" && u.Scheme != "mqtt") || u.Host == "" {
		return nil, fmt.Errorf("%w: mqtt=%q: the raw MQTT engine speaks tcp://host:port only (use --client paho for other schemes)",
			ErrConfig, url)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "1883")
	}
	if r.lnk != nil {
		addr := r.relays[url]
		return func(ctx context.Context) (net.Conn, error) { return r.lnk.Dial(ctx, addr) }, nil
	}
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", host)
	}, nil
}

// countingConn counts the write system calls of a connection (all writes
// are made under rawConn.wmu).
type countingConn struct {
	net.Conn
	writes int64
	bytes  int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes++
	n, err := c.Conn.Write(p)
	c.bytes += int64(n)
	return n, err
}

// rawConn is one MQTT 3.1.1 connection spoken by the probe itself: a
// CONNECT/CONNACK handshake, then buffered writes (under wmu, shared by the
// sending goroutine and the reader's PUBRELs) and one reading goroutine.
type rawConn struct {
	url  string
	id   string
	conn *countingConn
	rd   packetReader
	wmu  sync.Mutex
	bw   *bufio.Writer

	closing atomic.Bool
}

// dialRaw connects and completes the MQTT handshake within
// cfg.ConnectTimeout.
func dialRaw(ctx context.Context, cfg Config, url, id string, dial dialFunc) (*rawConn, error) {
	cctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	fail := func(err error) error {
		return fmt.Errorf("%w: connect to %s as %s: %w", ErrMQTTUnreachable, url, id, err)
	}
	nc, err := dial(cctx)
	if err != nil {
		return nil, fail(err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	c := &rawConn{url: url, id: id, conn: &countingConn{Conn: nc}}
	c.bw = bufio.NewWriterSize(c.conn, rawBufSize)
	c.rd = packetReader{br: bufio.NewReaderSize(nc, rawBufSize)}
	if dl, ok := cctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	if err := c.writeFlush(encodeConnect(id, cfg.Username, cfg.Password)); err != nil {
		nc.Close()
		return nil, fail(err)
	}
	p, err := c.rd.next()
	if err != nil {
		nc.Close()
		return nil, fail(fmt.Errorf("waiting for CONNACK: %w", err))
	}
	if p.typ != pktConnack || len(p.body) != 2 {
		nc.Close()
		return nil, fail(fmt.Errorf("%w: expected CONNACK, got packet type %d", errProtocol, p.typ))
	}
	if rc := p.body[1]; rc != 0 {
		nc.Close()
		return nil, fail(fmt.Errorf("refused by the broker: CONNACK return code %d", rc))
	}
	_ = nc.SetDeadline(time.Time{})
	return c, nil
}

// writeFlush writes b and flushes.
func (c *rawConn) writeFlush(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := c.bw.Write(b); err != nil {
		return err
	}
	return c.bw.Flush()
}

// flush writes out whatever is buffered.
func (c *rawConn) flush() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.bw.Flush()
}

// writeStats returns the write system calls and bytes so far.
func (c *rawConn) writeStats() (writes, bytes int64) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.conn.writes, c.conn.bytes
}

// close sends DISCONNECT (best effort) and closes the connection; the
// reader then ends.
func (c *rawConn) close() {
	if c.closing.Swap(true) {
		return
	}
	c.wmu.Lock()
	_ = c.conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.bw.Write([]byte{pktDisconn << 4, 0})
	_ = c.bw.Flush()
	c.wmu.Unlock()
	_ = c.conn.Close()
}
