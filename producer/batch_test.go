package producer

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/ferry-bridge/ferry/internal/fakekafka"
	"github.com/ferry-bridge/ferry/internal/lz4frame"
)

// kafkaGoBatch is what kafka-go's own encoder writes for recs: the bytes
// Ferry sent before it encoded batches itself.
func kafkaGoBatch(t testing.TB, recs []*Record, codec kafka.Compression) []byte {
	t.Helper()
	krecs := make([]kafka.Record, len(recs))
	for i, r := range recs {
		krecs[i] = kafka.Record{Time: r.Received, Key: kafka.NewBytes(r.Key), Value: kafka.NewBytes(r.Value), Headers: r.Headers}
	}
	rs := protocol.RecordSet{Version: 2, Attributes: protocol.Attributes(codec) & 0x7, Records: protocol.NewRecordReader(krecs...)}
	var buf bytes.Buffer
	if _, err := rs.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// batchRecords are records of every shape the encoder must get right: nil
// and empty keys, values and header values, lengths on both sides of a
// varint byte (63/64, 8191/8192), several headers, timestamps out of order.
func batchRecords(rng *rand.Rand, n int) []*Record {
	base := time.Date(2026, 12, 3, 6, 0, 0, 0, time.UTC)
	lens := []int{0, 1, 12, 63, 64, 127, 128, 8191, 8192, 20000}
	bs := func() []byte {
		switch rng.IntN(6) {
		case 0:
			return nil
		case 1:
			return []byte{}
		}
		return bytes.Repeat([]byte{byte('a' + rng.IntN(26))}, lens[rng.IntN(len(lens))])
	}
	recs := make([]*Record, n)
	for i := range recs {
		r := &Record{Topic: "t", Key: bs(), Value: bs(), Received: base.Add(time.Duration(rng.IntN(5000)-1000) * time.Millisecond)}
		for h := range rng.IntN(9) {
			r.Headers = append(r.Headers, kafka.Header{Key: fmt.Sprintf("h%d%s", h, strings.Repeat("k", rng.IntN(70))), Value: bs()})
		}
		recs[i] = r
	}
	return recs
}

// The producer's batches are byte for byte what kafka-go's encoder writes
// (uncompressed: compressed output may depend on how the compressor was fed),
// so Kafka receives the same records as before, CRC included.
func TestBatchMatchesKafkaGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 7, 300} {
		for round := range 20 {
			recs := batchRecords(rng, n)
			got, err := encodeBatch([]byte("prefix"), recs, 0, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if string(got[:6]) != "prefix" {
				t.Fatal("encodeBatch overwrote what dst held")
			}
			if want := kafkaGoBatch(t, recs, 0); !bytes.Equal(got[6:], want) {
				t.Fatalf("%d records (round %d): %d bytes differ from kafka-go's %d (first difference at %d)",
					n, round, len(got)-6, len(want), firstDiff(got[6:], want))
			}
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// Compressed batches pass a broker's checks and decode (kafka-go's reader)
// to the same records, with their timestamps; a record without a receive
// time gets the batch's now.
func TestBatchCompressedRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	now := time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)
	for _, name := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		t.Run(name, func(t *testing.T) {
			codec, err := compressionCodec(name)
			if err != nil {
				t.Fatal(err)
			}
			recs := batchRecords(rng, 50)
			recs[3].Received = time.Time{}
			b, err := encodeBatch(nil, recs, codec, now)
			if err != nil {
				t.Fatal(err)
			}
			if err := fakekafka.CheckBatch(b); err != nil {
				t.Fatal(err)
			}
			var rs protocol.RecordSet
			if _, err := rs.ReadFrom(bytes.NewReader(b)); err != nil {
				t.Fatal(err)
			}
			if got := rs.Attributes.Compression(); got != codec {
				t.Fatalf("batch attributes say %v, want %v", got, codec)
			}
			for i := 0; ; i++ {
				r, err := rs.Records.ReadRecord()
				if err == io.EOF {
					if i != len(recs) {
						t.Fatalf("%d records decoded, %d encoded", i, len(recs))
					}
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				want := recs[i]
				wantTime := want.Received
				if wantTime.IsZero() {
					wantTime = now
				}
				if r.Offset != int64(i) || !r.Time.Equal(wantTime) {
					t.Fatalf("record %d: offset %d time %v, want %d %v", i, r.Offset, r.Time, i, wantTime)
				}
				checkBytes(t, fmt.Sprintf("record %d key", i), r.Key, want.Key)
				checkBytes(t, fmt.Sprintf("record %d value", i), r.Value, want.Value)
				if len(r.Headers) != len(want.Headers) {
					t.Fatalf("record %d: %d headers, want %d", i, len(r.Headers), len(want.Headers))
				}
				for j, h := range r.Headers {
					if h.Key != want.Headers[j].Key || !bytes.Equal(h.Value, want.Headers[j].Value) {
						t.Fatalf("record %d header %d: %q=%q, want %q=%q", i, j, h.Key, h.Value, want.Headers[j].Key, want.Headers[j].Value)
					}
				}
			}
		})
	}
}

func checkBytes(t *testing.T, what string, got protocol.Bytes, want []byte) {
	t.Helper()
	if want == nil {
		if got != nil {
			t.Fatalf("%s: not null, want null", what)
		}
		return
	}
	b, err := protocol.ReadAll(got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("%s: %d bytes, want %d", what, len(b), len(want))
	}
}

// FuzzBatchMatchesKafkaGo: any key, value and header bytes encode as
// kafka-go encodes them.
func FuzzBatchMatchesKafkaGo(f *testing.F) {
	f.Add([]byte("k"), []byte("v"), "h", []byte("hv"), int64(0), uint8(1))
	f.Add([]byte{}, []byte(nil), "", []byte(nil), int64(-5000), uint8(3))
	f.Fuzz(func(t *testing.T, key, value []byte, hk string, hv []byte, dt int64, n uint8) {
		base := time.Date(2026, 12, 3, 6, 0, 0, 0, time.UTC)
		recs := make([]*Record, int(n%8)+1)
		for i := range recs {
			recs[i] = &Record{Key: key, Value: value, Received: base.Add(time.Duration(dt%1e12*int64(i)) * time.Microsecond),
				Headers: []kafka.Header{{Key: hk, Value: hv}}}
		}
		got, err := encodeBatch(nil, recs, 0, base)
		if err != nil {
			t.Fatal(err)
		}
		if want := kafkaGoBatch(t, recs, 0); !bytes.Equal(got, want) {
			t.Fatalf("differs from kafka-go's at byte %d", firstDiff(got, want))
		}
	})
}

// BenchmarkEncodeBatch: the producer's encoder against kafka-go's, 300
// records of Ferry's default shape (12 B payload, key, five headers).
func BenchmarkEncodeBatch(b *testing.B) {
	recs := make([]*Record, 300)
	now := time.Now()
	for i := range recs {
		recs[i] = &Record{Key: []byte("bench/kafkacost/1"), Value: []byte("0123456789ab"), Received: now, Headers: []kafka.Header{
			{Key: "mqtt.topic", Value: []byte("bench/kafkacost/1")}, {Key: "mqtt.qos", Value: []byte("1")},
			{Key: "mqtt.client_id", Value: []byte("bench-client-1")}, {Key: "ferry.origin", Value: []byte("ferry-0123456789abcdef")},
			{Key: "mqtt.packet_id", Value: []byte("12345")}}}
	}
	b.Run("ferry", func(b *testing.B) {
		var buf []byte
		b.ReportAllocs()
		for b.Loop() {
			var err error
			if buf, err = encodeBatch(buf[:0], recs, 0, now); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
	})
	b.Run("kafka-go", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			kafkaGoBatch(b, recs, 0)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
	})
}

// An lz4 batch is one frame of 64 KiB blocks without a content checksum
// (the Java producer's shape; package lz4frame): a reader sizes its buffer by the
// frame's block size, and Kafka does not check the content checksum. A
// batch larger than a block is several blocks of one frame, and reads back
// (TestBatchCompressedRoundTrip reads smaller ones).
func TestLZ4BatchFrameIs64KiBBlocksWithoutChecksum(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	recs := batchRecords(rng, 2000)
	for i := range recs {
		recs[i].Value = make([]byte, 100+rng.IntN(100)) // ~300 KiB of records: several blocks
		for j := range recs[i].Value {
			recs[i].Value[j] = byte(rng.IntN(256))
		}
	}
	for range 3 { // a pooled writer keeps its options
		b, err := encodeBatch(nil, recs, kafka.Lz4, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		size, sum, err := lz4frame.Descriptor(b[4+batchHeaderLen:])
		if err != nil || size != lz4frame.BlockSize || sum {
			t.Fatalf("batch frame of %d-byte blocks, content checksum %v (%v); want 64 KiB blocks, no checksum", size, sum, err)
		}
		var rs protocol.RecordSet
		if _, err := rs.ReadFrom(bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			r, err := rs.Records.ReadRecord()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			v, _ := io.ReadAll(r.Value)
			if !bytes.Equal(v, recs[n].Value) {
				t.Fatalf("record %d: value differs", n)
			}
			n++
		}
		if n != len(recs) {
			t.Fatalf("%d records read back, want %d", n, len(recs))
		}
	}
}

// BenchmarkEncodeBatchLZ4: 400 records of Ferry's default shape compressed
// with Ferry's lz4 writer (package lz4frame), and, for comparison, with kafka-go's
// codec (4 MiB blocks, content checksum).
func BenchmarkEncodeBatchLZ4(b *testing.B) {
	recs := make([]*Record, 400)
	now := time.Now()
	for i := range recs {
		recs[i] = &Record{Key: []byte("bench/kafkacost/1"), Value: []byte("0123456789ab"), Received: now, Headers: []kafka.Header{
			{Key: "mqtt.topic", Value: []byte("bench/kafkacost/1")}, {Key: "mqtt.qos", Value: []byte("1")},
			{Key: "mqtt.client_id", Value: []byte("bench-client-1")}, {Key: "ferry.origin", Value: []byte("ferry-0123456789abcdef")},
			{Key: "mqtt.packet_id", Value: []byte(strconv.Itoa(i))}}}
	}
	var raw []byte
	raw = appendRecords(raw, recs, now.UnixMilli(), now.UnixMilli())
	b.Run("ferry", func(b *testing.B) {
		var buf []byte
		b.ReportAllocs()
		for b.Loop() {
			var err error
			if buf, err = encodeBatch(buf[:0], recs, kafka.Lz4, now); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(buf)), "bytes")
	})
	for _, c := range []struct {
		name string
		w    func(io.Writer) io.WriteCloser
	}{
		{"ferry-writer", func(out io.Writer) io.WriteCloser { w, _ := compressWriter(kafka.Lz4, out); return w }},
		{"kafka-go-codec", kafka.Lz4.Codec().NewWriter},
	} {
		b.Run(c.name, func(b *testing.B) {
			var out bytes.Buffer
			b.ReportAllocs()
			for b.Loop() {
				out.Reset()
				w := c.w(&out)
				if _, err := w.Write(raw); err != nil {
					b.Fatal(err)
				}
				if err := w.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(out.Len()), "bytes")
		})
	}
}
