package testhelp

import (
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
)

// FreeAddr returns a 127.0.0.1 address with a port nobody listens on now,
// for a process the test starts later (a bridge, a broker, a restart on
// the same address after a kill). The port is drawn from 10000-32767, below
// Linux's ephemeral range (32768-60999): a port of that range can be taken
// between the check and the bind by any outgoing connection or port-0
// listener on the machine (a README test's `go run` builds for seconds
// meanwhile, and lost its HTTP port once so).
func FreeAddr(t testing.TB) string {
	t.Helper()
	addrs, err := FreeAddrs(1)
	if err != nil {
		t.Fatal(err)
	}
	return addrs[0]
}

// FreeAddrs is FreeAddr for n distinct addresses, without a test.
func FreeAddrs(n int) ([]string, error) {
	var out []string
	for range 200 * n {
		if len(out) == n {
			break
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 10000+rand.IntN(22768)))
		if err != nil {
			continue
		}
		defer l.Close() // held until all are drawn: distinct
		out = append(out, l.Addr().String())
	}
	if len(out) < n {
		return nil, fmt.Errorf("no %d free ports in 10000-32767", n)
	}
	return out, nil
}
