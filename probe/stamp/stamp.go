// Package stamp writes and reads the 12-byte probe stamp (sequence number
// and send time) that lets the probe join what it sent with what it
// received, whatever the payload size.
//
// Layout, big endian, at the start of the payload:
//
//	bytes 0..3   uint32 sequence number
//	bytes 4..11  int64  send time, Unix nanoseconds
//
// The rest of the payload is filler and is never read. Twelve bytes is the
// size of the reference's sensor messages, so the probe can reproduce them
// exactly.
package stamp

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Size is the length of a stamp in bytes and the smallest payload the probe
// can send.
const Size = 12

// Errors returned by this package.
var (
	// ErrShort means a payload is shorter than a stamp.
	ErrShort = errors.New("stamp: payload shorter than 12 bytes")
	// ErrImplausible means a payload parses but its sequence or time lies
	// outside the window of the current run: it is not one of ours.
	ErrImplausible = errors.New("stamp: sequence or time outside the run")
)

// Stamp is the probe's per-message identity.
type Stamp struct {
	// Seq numbers messages of one run from 0.
	Seq uint32
	// SentNs is the send time in Unix nanoseconds. In open-loop runs it is
	// the intended send time (coordinated-omission correction).
	SentNs int64
}

// Put writes s into the first Size bytes of p. It panics if p is shorter
// than Size: callers size payloads with Payload.
func Put(p []byte, s Stamp) {
	_ = p[Size-1]
	binary.BigEndian.PutUint32(p[0:4], s.Seq)
	binary.BigEndian.PutUint64(p[4:12], uint64(s.SentNs))
}

// Parse reads the stamp at the start of p. It only checks the length: use a
// Window to reject foreign messages.
func Parse(p []byte) (Stamp, error) {
	if len(p) < Size {
		return Stamp{}, fmt.Errorf("%w: got %d", ErrShort, len(p))
	}
	return Stamp{
		Seq:    binary.BigEndian.Uint32(p[0:4]),
		SentNs: int64(binary.BigEndian.Uint64(p[4:12])),
	}, nil
}

// Window describes the stamps one run can produce: sequences below Total,
// send times in [FromNs, ToNs]. Messages outside it are foreign.
type Window struct {
	Total  uint32
	FromNs int64
	ToNs   int64
}

// Check parses p and verifies that its stamp belongs to the window.
func (w Window) Check(p []byte) (Stamp, error) {
	s, err := Parse(p)
	if err != nil {
		return Stamp{}, err
	}
	if s.Seq >= w.Total || s.SentNs < w.FromNs || s.SentNs > w.ToNs {
		return Stamp{}, fmt.Errorf("%w: seq %d time %d not in [0,%d) x [%d,%d]",
			ErrImplausible, s.Seq, s.SentNs, w.Total, w.FromNs, w.ToNs)
	}
	return s, nil
}

// Payload builds a payload template of size bytes: a zeroed stamp followed
// by filler. With a non-empty fill, the filler repeats fill (the content of
// --payload-file) to the size; otherwise it is zeros. size must be at least
// Size.
func Payload(size int, fill []byte) ([]byte, error) {
	if size < Size {
		return nil, fmt.Errorf("%w: payload size %d", ErrShort, size)
	}
	p := make([]byte, size)
	if len(fill) > 0 {
		for off := Size; off < size; off += len(fill) {
			copy(p[off:], fill)
		}
	}
	return p, nil
}
