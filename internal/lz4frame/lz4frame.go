// Package lz4frame writes the lz4 frames Ferry's Kafka records are
// compressed in, for the forward producer (kafka-go) and the state tables
// (franz-go): the Java producer's shape, 64 KiB blocks and no content
// checksum. Both libraries' own lz4 writers (pierrec/lz4's defaults) write
// 4 MiB blocks with an xxHash32 of the whole content, and both cost more
// than they give:
//
//   - a reader of a frame allocates a buffer of the frame's block size.
//     Kafka answers a ListOffsets by time (a session replay asks one per
//     partition it starts at a subscription's time) by decompressing the
//     batch that holds the offset into a buffer it does not reuse: 4 MiB a
//     lookup, humongous objects to the broker's G1, which spent a
//     10,000-session reconnect storm in full collections (docs/sessions.md).
//     A consumer (Ferry's own reverse path and table readers, a Java
//     consumer) sizes its buffers the same way.
//   - Kafka's reader does not check the content checksum
//     (Lz4BlockInputStream reads past it); computing it was 1.8% of the
//     bridge's CPU at 400k msg/s (docs/benchmarks.md).
//
// Block checksums stay off (pierrec's default, and the Java producer's).
package lz4frame

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"sync"

	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kgo"
)

var writers = sync.Pool{New: func() any {
	w := lz4.NewWriter(nil)
	if err := w.Apply(lz4.BlockSizeOption(lz4.Block64Kb), lz4.ChecksumOption(false)); err != nil {
		panic(err) // constant options: a pierrec/lz4 that refuses them is a build bug
	}
	return w
}}

// NewWriter returns a writer of one lz4 frame into out; its Close ends the
// frame and gives the writer back to a pool (do not use it after).
func NewWriter(out io.Writer) io.WriteCloser {
	w := writers.Get().(*lz4.Writer)
	w.Reset(out)
	return pooled{w}
}

type pooled struct{ *lz4.Writer }

func (w pooled) Close() error {
	err := w.Writer.Close()
	w.Writer.Reset(nil)
	writers.Put(w.Writer)
	return err
}

// Compressor is a franz-go producer's compressor (kgo.WithCompressor) that
// writes these frames; a batch that does not shrink goes uncompressed, as
// with franz-go's own.
type Compressor struct{}

func (Compressor) Compress(dst *bytes.Buffer, src []byte, _ ...kgo.CompressFlag) ([]byte, kgo.CompressionCodecType) {
	w := NewWriter(dst)
	_, err := w.Write(src)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil || dst.Len() >= len(src) {
		return src, kgo.CodecNone
	}
	return dst.Bytes(), kgo.CodecLz4
}

// BlockSize is the block size of the frames NewWriter writes.
const BlockSize = 64 << 10

// Descriptor reads the descriptor of the lz4 frame that frame starts with:
// its block size and whether it carries a content checksum.
func Descriptor(frame []byte) (blockSize int, contentChecksum bool, err error) {
	if len(frame) < 6 || binary.LittleEndian.Uint32(frame) != 0x184D2204 {
		return 0, false, errors.New("lz4frame: not an lz4 frame")
	}
	flg, bd := frame[4], frame[5]
	idx := bd >> 4 & 7
	if idx < 4 {
		return 0, false, errors.New("lz4frame: reserved block size")
	}
	return 1 << (8 + 2*idx), flg&0x04 != 0, nil
}
