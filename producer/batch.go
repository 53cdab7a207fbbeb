package producer

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/ferry-bridge/ferry/internal/lz4frame"
)

// The producer encodes each partition's records itself, as one Kafka record
// batch (magic v2) in one contiguous buffer, and sends the bytes with
// kafka-go's raw produce request: kafka-go still does the connection, the
// request framing and the response. Its own encoder writes every varint
// through an io.Writer of pages and wraps each key and value in a reader
// (two allocations a record); under load it was an eighth of the bridge's
// CPU. The bytes are those kafka-go's encoder writes (TestBatchMatchesKafkaGo
// compares them), so Kafka sees the same records.

// Offsets in a v2 record batch, after the 4-byte size of the record set.
const (
	batchHeaderLen   = 61 // baseOffset .. recordCount
	batchLengthAt    = 8  // int32: bytes after this field
	batchCRCAt       = 17 // uint32 CRC-32C of attributes .. end
	batchAttrsAt     = 21 // the CRC covers from here
	batchLastDeltaAt = 23
	batchFirstTSAt   = 27
	batchMaxTSAt     = 35
	batchCountAt     = 57
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encodeBatch appends to dst the record set of recs as a produce request's
// partition carries it: its int32 size, then one v2 record batch (no
// producer id, CreateTime from each Record.Received, now for a zero one),
// its records compressed with codec. recs must not be empty.
func encodeBatch(dst []byte, recs []*Record, codec kafka.Compression, now time.Time) ([]byte, error) {
	start := len(dst)
	dst = append(dst, make([]byte, 4+batchHeaderLen)...)
	h := dst[start+4:]
	binary.BigEndian.PutUint32(h[12:], 0xffffffff) // partition leader epoch: -1
	h[16] = 2                                      // magic
	binary.BigEndian.PutUint16(h[batchAttrsAt:], uint16(codec)&0x7)
	binary.BigEndian.PutUint64(h[43:], 0xffffffffffffffff) // producer id: -1
	binary.BigEndian.PutUint16(h[51:], 0xffff)             // producer epoch: -1
	binary.BigEndian.PutUint32(h[53:], 0xffffffff)         // base sequence: -1

	nowMs := now.UnixMilli()
	first, maxTS := int64(0), int64(0)
	for i, r := range recs {
		t := millis(r.Received, nowMs)
		if i == 0 {
			first = t
		}
		maxTS = max(maxTS, t)
	}

	if codec == 0 {
		dst = appendRecords(dst, recs, first, nowMs)
	} else {
		out := bytes.NewBuffer(dst)
		w, ok := compressWriter(codec, out)
		if !ok {
			return dst[:start], fmt.Errorf("compression %v: no codec", codec)
		}
		raw := scratchPool.Get().(*[]byte)
		*raw = appendRecords((*raw)[:0], recs, first, nowMs)
		_, err := w.Write(*raw)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if cap(*raw) <= 4<<20 {
			scratchPool.Put(raw)
		}
		if err != nil {
			return dst[:start], fmt.Errorf("compressing a batch with %v: %w", codec, err)
		}
		dst = out.Bytes()
	}

	b := dst[start:]
	h = b[4:]
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	binary.BigEndian.PutUint32(h[batchLengthAt:], uint32(len(h)-12))
	binary.BigEndian.PutUint32(h[batchLastDeltaAt:], uint32(len(recs)-1))
	binary.BigEndian.PutUint64(h[batchFirstTSAt:], uint64(first))
	binary.BigEndian.PutUint64(h[batchMaxTSAt:], uint64(maxTS))
	binary.BigEndian.PutUint32(h[batchCountAt:], uint32(len(recs)))
	binary.BigEndian.PutUint32(h[batchCRCAt:], crc32.Checksum(h[batchAttrsAt:], castagnoli))
	return dst, nil
}

// compressWriter is the writer that compresses a batch's records with
// codec into out: Ferry's own lz4 frames (package lz4frame), kafka-go's
// writers for the others.
func compressWriter(codec kafka.Compression, out io.Writer) (io.WriteCloser, bool) {
	if codec == kafka.Lz4 {
		return lz4frame.NewWriter(out), true
	}
	c := codec.Codec()
	if c == nil {
		return nil, false
	}
	return c.NewWriter(out), true
}

// scratchPool holds the uncompressed records of a batch being compressed.
var scratchPool = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// appendRecords appends the v2 encoding of every record of recs.
func appendRecords(dst []byte, recs []*Record, first, nowMs int64) []byte {
	for i, r := range recs {
		tsDelta := millis(r.Received, nowMs) - first
		n := 1 + varintLen(tsDelta) + varintLen(int64(i)) +
			nullBytesLen(r.Key) + nullBytesLen(r.Value) + varintLen(int64(len(r.Headers)))
		for _, hd := range r.Headers {
			n += varintLen(int64(len(hd.Key))) + len(hd.Key) + nullBytesLen(hd.Value)
		}
		dst = binary.AppendVarint(dst, int64(n))
		dst = append(dst, 0) // record attributes
		dst = binary.AppendVarint(dst, tsDelta)
		dst = binary.AppendVarint(dst, int64(i))
		dst = appendNullBytes(dst, r.Key)
		dst = appendNullBytes(dst, r.Value)
		dst = binary.AppendVarint(dst, int64(len(r.Headers)))
		for _, hd := range r.Headers {
			dst = binary.AppendVarint(dst, int64(len(hd.Key)))
			dst = append(dst, hd.Key...)
			dst = appendNullBytes(dst, hd.Value)
		}
	}
	return dst
}

// millis is t in Unix milliseconds, nowMs for the zero time.
func millis(t time.Time, nowMs int64) int64 {
	if t.IsZero() {
		return nowMs
	}
	return t.UnixMilli()
}

// appendNullBytes appends b as Kafka's nullable varint-length bytes: -1 for nil.
func appendNullBytes(dst, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(b)))
	return append(dst, b...)
}

func nullBytesLen(b []byte) int {
	if b == nil {
		return 1
	}
	return varintLen(int64(len(b))) + len(b)
}

// varintLen is the size of v as a zig-zag varint.
func varintLen(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}
