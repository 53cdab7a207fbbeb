package lz4frame

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kgo"
)

// checkFrame fails unless frame starts an lz4 frame of 64 KiB blocks
// without a content checksum.
func checkFrame(t *testing.T, frame []byte) {
	t.Helper()
	size, sum, err := Descriptor(frame)
	if err != nil || size != BlockSize || sum {
		t.Fatalf("frame of %d-byte blocks, content checksum %v (%v); want 64 KiB blocks, no checksum", size, sum, err)
	}
}

// TestDescriptorReadsPierrecFrames: the descriptor of pierrec/lz4's default
// frame (what kafka-go and franz-go write) says 4 MiB and a checksum.
func TestDescriptorReadsPierrecFrames(t *testing.T) {
	var out bytes.Buffer
	w := lz4.NewWriter(&out)
	w.Write([]byte("hello"))
	w.Close()
	if size, sum, err := Descriptor(out.Bytes()); err != nil || size != 4<<20 || !sum {
		t.Fatalf("pierrec's default frame: %d, %v, %v", size, sum, err)
	}
	if _, _, err := Descriptor([]byte("not a frame")); err == nil {
		t.Fatal("no error for what is not a frame")
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
