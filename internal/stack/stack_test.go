package stack

import (
	"testing"
	"unsafe"
)

// deep calls itself n times with a frame of about 1 KiB each.
//
//go:noinline
func deep(n int) byte {
	var b [1000]byte
	b[n%len(b)] = byte(n)
	if n == 0 {
		return b[0]
	}
	return deep(n-1) + b[n%len(b)]
}

// moved reports whether a goroutine's stack was copied (a local variable's
// address changed) while it went about 10 KiB deep, after grow when asked.
func moved(grow bool) bool {
	done := make(chan bool)
	go func() {
		if grow {
			Grow()
		}
		var x int
		before := uintptr(unsafe.Pointer(&x))
		deep(10)
		done <- uintptr(unsafe.Pointer(&x)) != before
	}()
	return <-done
}

// TestGrowSparesTheDeepCopy: a goroutine that goes 10 KiB deep right after
// Grow keeps its stack where it is; without Grow the runtime moves it (the
// copies Grow is there to save). The second half checks the test itself.
func TestGrowSparesTheDeepCopy(t *testing.T) {
	if moved(true) {
		t.Error("the stack moved going 10 KiB deep after Grow: Grow did not make it 16 KiB")
	}
	if !moved(false) {
		t.Skip("a new goroutine's stack holds 10 KiB here already (the runtime's adaptive starting size): nothing to compare")
	}
}
