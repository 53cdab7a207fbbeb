// Package link puts the probe's MQTT clients behind an emulated network
// link (delay, jitter, loss, rate) built in user space, mahimahi-style: the
// clients' sockets live in a private network namespace whose only route
// leads into a TUN device; a forwarder in this process reads each IP packet
// there, drops, delays or paces it, and writes it into a second TUN device
// in the host namespace, and the same on the way back. The kernel's own TCP
// on both ends therefore sees real loss and real round-trip times (it
// retransmits, its congestion window shrinks), as on a satellite hop.
//
// Addresses: the two ends are 169.254.N.2 (namespace) and 169.254.N.1
// (host), link-local addresses that exist only on the two TUN devices. On
// the host end a TCP relay accepts the clients and connects to the real
// broker over loopback, so the broker can listen on 127.0.0.1.
//
// Cleanup: the namespace is anonymous (held only by a file descriptor and
// the sockets in it) and the TUN devices are not persistent, so the kernel
// removes all of it when Close runs or the process dies, even by SIGKILL.
package link

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Errors returned by this package.
var (
	// ErrSpec means a --link specification could not be parsed.
	ErrSpec = errors.New("link: bad specification")
	// ErrUnavailable means the emulation cannot run here (not root, no
	// /dev/net/tun, no network namespaces).
	ErrUnavailable = errors.New("link: emulation unavailable")
)

// Params describe one direction of the link; both directions get the same.
type Params struct {
	// Name is the preset name or "custom".
	Name string
	// Delay is the one-way propagation delay.
	Delay time.Duration
	// Jitter is the half-width of a uniform random variation added to
	// Delay per packet. Packets are never reordered: a packet is never
	// delivered before the one ahead of it.
	Jitter time.Duration
	// Loss is the probability of dropping each packet (0..1).
	Loss float64
	// RateBitS is the link's rate in bit/s (packets are paced by their
	// size); 0 is unlimited.
	RateBitS float64
	// QueueBytes bounds the bytes waiting for the rate limiter; beyond it
	// packets are dropped (tail drop, like a router). Default: one second
	// at RateBitS, at least 64 KB.
	QueueBytes int
}

// Presets are the named links of --link.
var Presets = map[string]Params{
	// Geostationary satellite, as in the TCP-over-satellite write-up.
	"satellite": {Name: "satellite", Delay: 270 * time.Millisecond, Jitter: 10 * time.Millisecond, Loss: 0.005, RateBitS: 2e6},
	// A busy Wi-Fi hop.
	"wifi": {Name: "wifi", Delay: 3 * time.Millisecond, Jitter: 2 * time.Millisecond, Loss: 0.002, RateBitS: 50e6},
	// A switched LAN.
	"lan": {Name: "lan", Delay: 100 * time.Microsecond, Jitter: 20 * time.Microsecond, RateBitS: 1e9},
}

// String renders p like a custom spec.
func (p Params) String() string {
	rate := "unlimited"
	if p.RateBitS > 0 {
		rate = fmtRate(p.RateBitS)
	}
	return fmt.Sprintf("%s: delay=%v,jitter=%v,loss=%g%%,rate=%s (each direction)", p.Name, p.Delay, p.Jitter, p.Loss*100, rate)
}

func fmtRate(r float64) string {
	switch {
	case r >= 1e9:
		return strconv.FormatFloat(r/1e9, 'g', -1, 64) + "gbit"
	case r >= 1e6:
		return strconv.FormatFloat(r/1e6, 'g', -1, 64) + "mbit"
	case r >= 1e3:
		return strconv.FormatFloat(r/1e3, 'g', -1, 64) + "kbit"
	}
	return strconv.FormatFloat(r, 'g', -1, 64) + "bit"
}

// Parse reads "satellite", "wifi", "lan" or
// "custom:delay=270ms,jitter=10ms,loss=0.5%,rate=2mbit" (any subset of the
// keys; rate units bit, kbit, mbit, gbit; loss in percent).
func Parse(spec string) (Params, error) {
	if p, ok := Presets[spec]; ok {
		return p, nil
	}
	rest, ok := strings.CutPrefix(spec, "custom:")
	if !ok {
		return Params{}, fmt.Errorf("%w: %q: want satellite, wifi, lan or custom:delay=..,jitter=..,loss=..%%,rate=..", ErrSpec, spec)
	}
	p := Params{Name: "custom"}
	for _, kv := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return Params{}, fmt.Errorf("%w: %q: want key=value", ErrSpec, kv)
		}
		var err error
		switch k {
		case "delay":
			p.Delay, err = time.ParseDuration(v)
		case "jitter":
			p.Jitter, err = time.ParseDuration(v)
		case "loss":
			var pct float64
			pct, err = strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
			p.Loss = pct / 100
		case "rate":
			p.RateBitS, err = parseRate(v)
		default:
			err = errors.New("unknown key (want delay, jitter, loss, rate)")
		}
		if err != nil {
			return Params{}, fmt.Errorf("%w: %s=%s: %w", ErrSpec, k, v, err)
		}
	}
	if p.Delay < 0 || p.Jitter < 0 || p.Jitter > p.Delay && p.Delay > 0 || p.Loss < 0 || p.Loss >= 1 || p.RateBitS < 0 {
		return Params{}, fmt.Errorf("%w: %q: delay, jitter, rate >= 0, jitter <= delay, loss in [0, 100%%)", ErrSpec, spec)
	}
	return p, nil
}

func parseRate(v string) (float64, error) {
	v = strings.ToLower(v)
	mult := 1.0
	for _, u := range []struct {
		suffix string
		m      float64
	}{{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}} {
		if s, ok := strings.CutSuffix(v, u.suffix); ok {
			v, mult = s, u.m
			break
		}
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, err
	}
	return f * mult, nil
}
