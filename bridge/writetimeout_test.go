package bridge

import (
	"io"
	"net"
	"testing"
	"time"
)

// TestCorkedWritesLeaveTogether: between cork and uncork, writes return at
// once and are held in order; uncork sends them with one write.
func TestCorkedWritesLeaveTogether(t *testing.T) {
	server, client := net.Pipe() // a write blocks until the other end reads
	defer server.Close()
	defer client.Close()
	c := &writeTimeoutConn{Conn: server, timeout: 5 * time.Second}
	c.cork()
	wrote := make(chan error, 1)
	go func() {
		for _, s := range []string{"ab", "cd", "ef"} {
			if _, err := c.Write([]byte(s)); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- nil
	}()
	select { // no reader yet: corked writes must not block
	case err := <-wrote:
		if err != nil {
			t.Fatalf("corked write: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("corked writes blocked: they went to the connection")
	}
	done := make(chan struct{})
	go func() { defer close(done); c.uncork() }()
	_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 16)
	n, err := client.Read(buf) // net.Pipe delivers one Write per Read
	if err != nil || string(buf[:n]) != "abcdef" {
		t.Fatalf("first read after uncork = %q, %v; want all held bytes in one write", buf[:n], err)
	}
	<-done
	// Uncorked again: a write goes straight through.
	go func() { _, _ = c.Write([]byte("gh")) }()
	if _, err := io.ReadFull(client, buf[:2]); err != nil || string(buf[:2]) != "gh" {
		t.Fatalf("uncorked write: %q, %v", buf[:2], err)
	}
}
