package lz4frame

import (
	"bytes"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kgo"
)

// CheckFrame fails unless frame starts an lz4 frame of 64 KiB blocks
// without a content checksum.
func checkFrame(t *testing.T, frame []byte) {
	t.Helper()
	if magic := binary.LittleEndian.Uint32(frame); magic != 0x184D2204 {
		t.Fatalf("frame magic %#x, want an lz4 frame", magic)
	}
	flg, bd := frame[4], frame[5]
	if flg&0x04 != 0 {
		t.Fatalf("FLG %#x: content checksum set", flg)
	}
	if size := bd >> 4 & 7; size != 4 {
		t.Fatalf("BD %#x: block max size index %d, want 4 (64 KiB)", bd, size)
	}
}

// TestWriterFrames: a frame of 64 KiB blocks without a content checksum
// that reads back, also when its content spans several blocks and when the
// writer comes from the pool again.
func TestWriterFrames(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{10, 70 << 10, 300 << 10} {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte('a' + rng.IntN(4))
		}
		for range 3 {
			var out bytes.Buffer
			w := NewWriter(&out)
			if _, err := w.Write(src); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			checkFrame(t, out.Bytes())
			got, err := io.ReadAll(lz4.NewReader(&out))
			if err != nil || !bytes.Equal(got, src) {
				t.Fatalf("%d bytes: read back %d bytes (%v)", n, len(got), err)
			}
		}
	}
}

// TestCompressor: franz-go's producer gets these frames; what does not
// shrink goes uncompressed.
func TestCompressor(t *testing.T) {
	src := bytes.Repeat([]byte(`{"subs":[{"filter":"a/b","qos":1}]}`), 50)
	got, codec := Compressor{}.Compress(new(bytes.Buffer), src)
	if codec != kgo.CodecLz4 {
		t.Fatalf("codec %v, want lz4", codec)
	}
	checkFrame(t, got)
	if back, err := io.ReadAll(lz4.NewReader(bytes.NewReader(got))); err != nil || !bytes.Equal(back, src) {
		t.Fatalf("read back %d bytes (%v)", len(back), err)
	}
	small := []byte("x")
	if got, codec := (Compressor{}).Compress(new(bytes.Buffer), small); codec != kgo.CodecNone || !bytes.Equal(got, small) {
		t.Fatalf("one byte: codec %v, %q", codec, got)
	}
}
