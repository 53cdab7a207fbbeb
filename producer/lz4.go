package producer

import (
	"io"
	"sync"

	"github.com/pierrec/lz4/v4"
	"github.com/segmentio/kafka-go"
)

// Ferry's lz4 frames are the Java producer's shape: 64 KiB blocks and no
// content checksum. kafka-go's codec (pierrec/lz4's defaults) writes 4 MiB
// blocks with an xxHash32 of the whole content, and both cost more than
// they give:
//
//   - a reader of the frame allocates a buffer of the frame's block size.
//     Kafka answers a ListOffsets by time (the session replays ask one per
//     partition they start at a subscription's time) by decompressing the
//     batch that holds the offset into a buffer it does not reuse: 4 MiB a
//     lookup, humongous objects to the broker's G1, which spent a
//     10,000-session reconnect storm in full collections (docs/sessions.md);
//     a Java consumer's decompression sizes its buffer the same way.
//   - Kafka's reader does not check the content checksum
//     (Lz4BlockInputStream reads past it), and computing it was 1.8% of the
//     bridge's CPU at 400k msg/s (docs/benchmarks.md).
//
// Block checksums stay off (pierrec's default, and the Java producer's).
var lz4Writers = sync.Pool{New: func() any {
	w := lz4.NewWriter(nil)
	if err := w.Apply(lz4.BlockSizeOption(lz4.Block64Kb), lz4.ChecksumOption(false)); err != nil {
		panic(err) // constant options: a pierrec/lz4 that refuses them is a build bug
	}
	return w
}}

// pooledLZ4 is a pooled lz4 writer that goes back to the pool on Close.
type pooledLZ4 struct{ *lz4.Writer }

func (w pooledLZ4) Close() error {
	err := w.Writer.Close()
	w.Writer.Reset(nil)
	lz4Writers.Put(w.Writer)
	return err
}

// compressor is the writer that compresses a batch's records with codec
// into out: Ferry's own for lz4, kafka-go's for the others.
func compressor(codec kafka.Compression, out io.Writer) (io.WriteCloser, bool) {
	if codec == kafka.Lz4 {
		w := lz4Writers.Get().(*lz4.Writer)
		w.Reset(out)
		return pooledLZ4{w}, true
	}
	c := codec.Codec()
	if c == nil {
		return nil, false
	}
	return c.NewWriter(out), true
}
