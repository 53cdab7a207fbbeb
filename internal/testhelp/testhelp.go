// Package testhelp holds the test helpers the packages' tests share: a
// quiet logger that shows its warnings when the test fails, a polling
// wait, and free addresses for processes a test starts (ports.go).
package testhelp

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"
)

// Logger is a logger for code under test. Quiet, unless FERRY_TEST_LOG is
// set (1: every line, to stderr; or a level name: FERRY_TEST_LOG=warn); a
// failing test shows what was logged at warn and above (a clean-clone
// run's failure is all one gets).
func Logger(t testing.TB) *slog.Logger {
	if os.Getenv("FERRY_TEST_LOG") == "" {
		buf := &cappedBuffer{max: 64 << 10}
		t.Cleanup(func() {
			if t.Failed() && buf.Len() > 0 {
				t.Logf("the warnings logged (FERRY_TEST_LOG=1 shows every line):\n%s", buf)
			}
		})
		return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	level := slog.LevelDebug
	_ = level.UnmarshalText([]byte(os.Getenv("FERRY_TEST_LOG")))
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// WaitFor polls cond until it holds, or fails the test after timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// cappedBuffer keeps the first max bytes written to it; safe for
// concurrent use.
type cappedBuffer struct {
	mu  sync.Mutex
	b   bytes.Buffer
	max int
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.b.Len()+len(p) <= c.max {
		c.b.Write(p)
	}
	return len(p), nil
}

// Len returns how many bytes it keeps.
func (c *cappedBuffer) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.Len()
}

func (c *cappedBuffer) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.String()
}

// RandHex returns n random bytes in hex: a suffix that keeps names (client
// ids, topics) of one test apart from every other's.
func RandHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
