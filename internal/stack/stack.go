// Package stack grows a goroutine's stack in one step while it is shallow.
//
// A goroutine starts with a small stack (2 KiB, or the average the runtime
// last measured) and doubles it whenever a call would overflow it, copying
// everything on it each time. A goroutine that is known to go deep (an MQTT
// connection's read loop through mochi and the session hook; a replay's
// deliveries: mochi passes its 800-byte packet by value through several
// frames) pays three or four copies of a deep stack; in a reconnect storm
// that was 7% of an instance's CPU. Grow, called first thing, makes one
// copy of a nearly empty stack instead.
package stack

// Grow makes the calling goroutine's stack at least 16 KiB. Its frame is
// about 12 KiB: the runtime grows the stack to the first power of two
// that holds it and what is already on it.
//
//go:noinline
func Grow() { grow(0) }

// grow's frame holds b whether or not the branch runs, so the stack grows
// on entry; b is zeroed only where it is declared, which Grow (i == 0)
// never reaches.
//
//go:noinline
func grow(i int) byte {
	if i > 0 {
		var b [12 << 10]byte
		b[i] = 1
		return b[i/2]
	}
	return 0
}
