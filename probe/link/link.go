package link

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Link is a running emulated link: a namespace for clients, two TUN
// devices and the forwarder between them. Create it with New, reach
// brokers through it with Expose and Dial, and Close it.
type Link struct {
	p      Params
	log    *slog.Logger
	ns     *os.File // the clients' network namespace
	inner  *os.File // TUN in the namespace
	outer  *os.File // TUN in the host namespace
	hostIP net.IP   // outer end, 169.254.N.1
	nsIP   net.IP   // inner end, 169.254.N.2

	up, down *pipe
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	mu       sync.Mutex
	relays   []net.Listener
	conns    map[net.Conn]struct{}
	closed   bool
}

// Stats are the forwarder's counters, per direction.
type Stats struct {
	// Forwarded, Lost (random loss) and QueueDrops (rate limiter's queue
	// full) count packets.
	Forwarded, Lost, QueueDrops int64
}

// tunDevice is the TUN clone device.
const tunDevice = "/dev/net/tun"

// available says why the emulation cannot run for user uid with the TUN
// clone device at tun, or nil.
func available(uid int, tun string) error {
	if uid != 0 {
		return fmt.Errorf("%w: creating a network namespace and TUN devices needs root (CAP_NET_ADMIN); run the probe as root or without --link", ErrUnavailable)
	}
	if _, err := os.Stat(tun); err != nil {
		return fmt.Errorf("%w: no TUN device: %w (load the tun module, or give a container --device /dev/net/tun)", ErrUnavailable, err)
	}
	return nil
}

// New builds the link. It needs root (CAP_NET_ADMIN) and /dev/net/tun.
func New(p Params, log *slog.Logger) (*Link, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := available(os.Geteuid(), tunDevice); err != nil {
		return nil, err
	}
	if p.QueueBytes == 0 {
		p.QueueBytes = max(64<<10, int(p.RateBitS/8))
	}
	// A /30 per process: 169.254.N.0/30 with N from the pid, so concurrent
	// probes do not collide.
	n := byte(16 + os.Getpid()%224)
	l := &Link{
		p: p, log: log,
		hostIP: net.IPv4(169, 254, n, 1).To4(),
		nsIP:   net.IPv4(169, 254, n, 2).To4(),
		conns:  map[net.Conn]struct{}{},
	}
	suffix := fmt.Sprintf("%d", os.Getpid()%100000)
	var err error
	if l.outer, err = newTUN("fpo"+suffix, l.hostIP); err != nil {
		return nil, err
	}
	err = l.inNamespace(true, func() error {
		var err error
		l.inner, err = newTUN("fpi"+suffix, l.nsIP)
		return err
	})
	if err != nil {
		l.outer.Close()
		if l.ns != nil {
			l.ns.Close()
		}
		return nil, err
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	seed := uint64(time.Now().UnixNano())
	l.up = newPipe(p, l.inner, l.outer, rand.New(rand.NewPCG(seed, 1)))
	l.down = newPipe(p, l.outer, l.inner, rand.New(rand.NewPCG(seed, 2)))
	for _, pp := range []*pipe{l.up, l.down} {
		l.wg.Add(2)
		go func() { defer l.wg.Done(); pp.read(l.ctx) }()
		go func() { defer l.wg.Done(); pp.write(l.ctx) }()
	}
	return l, nil
}

// Params returns the link's parameters.
func (l *Link) Params() Params { return l.p }

// Describe is a self-check line.
func (l *Link) Describe() string {
	u, d := l.up.stats(), l.down.stats()
	return fmt.Sprintf("link %s; clients in a private netns at %s, relay at %s; "+
		"packets up (clients -> broker): %d forwarded, %d lost, %d queue drops; down: %d forwarded, %d lost, %d queue drops",
		l.p, l.nsIP, l.hostIP, u.Forwarded, u.Lost, u.QueueDrops, d.Forwarded, d.Lost, d.QueueDrops)
}

// Stats returns the counters of the up (clients -> broker) and down
// directions.
func (l *Link) Stats() (up, down Stats) { return l.up.stats(), l.down.stats() }

// inNamespace runs f on a thread inside the link's namespace; with create
// it first creates the namespace. The thread returns to the host namespace
// afterwards; if it cannot, it is left locked and dies with the goroutine.
func (l *Link) inNamespace(create bool, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		host, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("%w: %w", ErrUnavailable, err)
			return
		}
		defer host.Close()
		if create {
			if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
				runtime.UnlockOSThread()
				errc <- fmt.Errorf("%w: new network namespace: %w", ErrUnavailable, err)
				return
			}
			if l.ns, err = os.Open("/proc/thread-self/ns/net"); err != nil {
				errc <- fmt.Errorf("%w: %w", ErrUnavailable, err) // thread stays locked: it is in the new namespace
				return
			}
		} else if err := unix.Setns(int(l.ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("link: enter namespace: %w", err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(host.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("link: leave namespace: %w", err)) // stays locked
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// newTUN creates a non-persistent TUN device in the calling thread's
// namespace with addr/30 and brings it up.
func newTUN(name string, addr net.IP) (*os.File, error) {
	fd, err := unix.Open(tunDevice, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: open /dev/net/tun: %w", ErrUnavailable, err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("link: %w", err)
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: create TUN %s: %w", ErrUnavailable, name, err)
	}
	if err := configure(name, addr); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("link: %w", err)
	}
	return os.NewFile(uintptr(fd), name), nil // reads go through the poller
}

// configure sets addr/30 on the interface and brings it (and, in a fresh
// namespace, nothing else) up.
func configure(name string, addr net.IP) error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("link: socket: %w", err)
	}
	defer unix.Close(s)
	set := func(req uint, what string, v []byte) error {
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			return err
		}
		if err := ifr.SetInet4Addr(v); err != nil {
			return err
		}
		if err := unix.IoctlIfreq(s, req, ifr); err != nil {
			return fmt.Errorf("link: %s of %s: %w", what, name, err)
		}
		return nil
	}
	if err := set(unix.SIOCSIFADDR, "address", addr.To4()); err != nil {
		return err
	}
	if err := set(unix.SIOCSIFNETMASK, "netmask", []byte{255, 255, 255, 252}); err != nil {
		return err
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("link: flags of %s: %w", name, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP | unix.IFF_RUNNING)
	if err := unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("link: bring %s up: %w", name, err)
	}
	return nil
}

// Expose starts a relay on the host end of the link that forwards each
// connection to target (host:port, e.g. the broker on 127.0.0.1) and
// returns the address clients in the namespace must Dial.
func (l *Link) Expose(target string) (string, error) {
	ln, err := net.Listen("tcp4", net.JoinHostPort(l.hostIP.String(), "0"))
	if err != nil {
		return "", fmt.Errorf("link: relay listen: %w", err)
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		ln.Close()
		return "", net.ErrClosed
	}
	l.relays = append(l.relays, ln)
	l.mu.Unlock()
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				l.relay(c, target)
			}()
		}
	}()
	return ln.Addr().String(), nil
}

func (l *Link) track(c net.Conn, add bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if add {
		if l.closed {
			return false
		}
		l.conns[c] = struct{}{}
	} else {
		delete(l.conns, c)
	}
	return true
}

func (l *Link) relay(c net.Conn, target string) {
	defer c.Close()
	b, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		l.log.Warn("link relay: dial broker", "target", target, "err", err)
		return
	}
	defer b.Close()
	if !l.track(c, true) || !l.track(b, true) {
		return
	}
	defer l.track(c, false)
	defer l.track(b, false)
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(b, c)
	go cp(c, b)
	<-done
	<-done
}

// Dial connects to addr (an address returned by Expose) from inside the
// link's namespace.
func (l *Link) Dial(ctx context.Context, addr string) (net.Conn, error) {
	var c net.Conn
	err := l.inNamespace(false, func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, "tcp4", addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("link: dial %s through the link: %w", addr, err)
	}
	return c, nil
}

// Close stops the relays and the forwarder and removes the devices and the
// namespace (the kernel drops them when the last descriptor closes).
func (l *Link) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	for _, ln := range l.relays {
		ln.Close()
	}
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	l.cancel()
	err := errors.Join(l.inner.Close(), l.outer.Close())
	l.up.close()
	l.down.close()
	l.wg.Wait()
	return errors.Join(err, l.ns.Close())
}

// packet is one IP packet waiting for its delivery time.
type packet struct {
	b  []byte
	at time.Time
}

// pipe is one direction of the link.
type pipe struct {
	p        Params
	in, out  *os.File
	rng      *rand.Rand
	q        chan packet
	closeQ   sync.Once
	busy     time.Time // when the rate limiter is free again
	last     time.Time // delivery time of the previous packet
	fwd      atomic.Int64
	lost     atomic.Int64
	qdrops   atomic.Int64
	writeErr atomic.Int64
}

func newPipe(p Params, in, out *os.File, rng *rand.Rand) *pipe {
	return &pipe{p: p, in: in, out: out, rng: rng, q: make(chan packet, 1<<14)}
}

func (pp *pipe) stats() Stats {
	return Stats{Forwarded: pp.fwd.Load(), Lost: pp.lost.Load(), QueueDrops: pp.qdrops.Load()}
}

func (pp *pipe) close() { pp.closeQ.Do(func() { close(pp.q) }) }

// read takes packets from in and schedules them: loss, then the rate
// limiter (a packet leaves when the previous one has been serialised),
// then delay and jitter, never overtaking the previous packet.
func (pp *pipe) read(ctx context.Context) {
	defer pp.close()
	buf := make([]byte, 65536)
	for ctx.Err() == nil {
		n, err := pp.in.Read(buf)
		if err != nil {
			return
		}
		if n == 0 || buf[0]>>4 != 4 { // IPv4 only (drops the kernel's IPv6 chatter)
			continue
		}
		if pp.p.Loss > 0 && pp.rng.Float64() < pp.p.Loss {
			pp.lost.Add(1)
			continue
		}
		now := time.Now()
		depart := now
		if pp.p.RateBitS > 0 {
			start := now
			if pp.busy.After(now) {
				start = pp.busy
				// Bytes still waiting to be serialised: a router's queue.
				if backlog := pp.busy.Sub(now).Seconds() * pp.p.RateBitS / 8; int(backlog)+n > pp.p.QueueBytes {
					pp.qdrops.Add(1)
					continue
				}
			}
			pp.busy = start.Add(time.Duration(float64(n*8) / pp.p.RateBitS * 1e9))
			depart = pp.busy
		}
		at := depart.Add(pp.p.Delay)
		if pp.p.Jitter > 0 {
			at = at.Add(time.Duration((pp.rng.Float64()*2 - 1) * float64(pp.p.Jitter)))
		}
		if at.Before(pp.last) {
			at = pp.last
		}
		pp.last = at
		b := append([]byte(nil), buf[:n]...)
		select {
		case pp.q <- packet{b: b, at: at}:
		default: // the delay line is full (16384 packets in flight)
			pp.qdrops.Add(1)
		}
	}
}

// write delivers scheduled packets at their time.
func (pp *pipe) write(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for pkt := range pp.q {
		if d := time.Until(pkt.at); d > 0 {
			t.Reset(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				return
			}
		}
		if _, err := pp.out.Write(pkt.b); err != nil {
			if ctx.Err() != nil {
				return
			}
			pp.writeErr.Add(1)
			continue
		}
		pp.fwd.Add(1)
	}
}
