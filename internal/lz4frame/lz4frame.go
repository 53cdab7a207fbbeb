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
