package stamp

import (
	"bytes"
	"errors"
	"math"
	"testing"
)

func TestPutParseRoundTrip(t *testing.T) {
	cases := []Stamp{
		{0, 0},
		{1, 1_700_000_000_123_456_789},
		{math.MaxUint32, math.MaxInt64},
		{42, -5},
	}
	for _, want := range cases {
		p := make([]byte, 20)
		Put(p, want)
		got, err := Parse(p)
		if err != nil {
			t.Fatalf("Parse(%v): %v", want, err)
		}
		if got != want {
			t.Errorf("round trip: got %+v, want %+v", got, want)
		}
	}
}

func TestLayoutIsBigEndian(t *testing.T) {
	p := make([]byte, Size)
	Put(p, Stamp{Seq: 0x01020304, SentNs: 0x05060708090a0b0c})
	want := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	if !bytes.Equal(p, want) {
		t.Fatalf("layout: got % x, want % x", p, want)
	}
}

func TestParseShort(t *testing.T) {
	for n := 0; n < Size; n++ {
		if _, err := Parse(make([]byte, n)); !errors.Is(err, ErrShort) {
			t.Errorf("len %d: err %v, want ErrShort", n, err)
		}
	}
}

func TestWindowCheck(t *testing.T) {
	w := Window{Total: 10, FromNs: 1000, ToNs: 2000}
	tests := []struct {
		name string
		s    Stamp
		ok   bool
	}{
		{"inside", Stamp{3, 1500}, true},
		{"edges", Stamp{9, 2000}, true},
		{"first", Stamp{0, 1000}, true},
		{"seq too high", Stamp{10, 1500}, false},
		{"too early", Stamp{1, 999}, false},
		{"too late", Stamp{1, 2001}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := make([]byte, Size)
			Put(p, tc.s)
			got, err := w.Check(p)
			if tc.ok {
				if err != nil || got != tc.s {
					t.Fatalf("Check: %+v, %v; want %+v", got, err, tc.s)
				}
				return
			}
			if !errors.Is(err, ErrImplausible) {
				t.Fatalf("Check: err %v, want ErrImplausible", err)
			}
		})
	}
	if _, err := w.Check([]byte("hello")); !errors.Is(err, ErrShort) {
		t.Errorf("short foreign payload: %v", err)
	}
}

func TestPayload(t *testing.T) {
	if _, err := Payload(11, nil); !errors.Is(err, ErrShort) {
		t.Fatalf("size 11: %v, want ErrShort", err)
	}
	p, err := Payload(12, []byte("xyz"))
	if err != nil || len(p) != 12 {
		t.Fatalf("size 12: len %d, %v", len(p), err)
	}
	p, err = Payload(19, []byte("abc"))
	if err != nil {
		t.Fatal(err)
	}
	if want := append(make([]byte, 12), "abcabca"...); !bytes.Equal(p, want) {
		t.Fatalf("filler: got %q, want %q", p, want)
	}
	p, _ = Payload(16, nil)
	if !bytes.Equal(p, make([]byte, 16)) {
		t.Fatalf("zero filler: %q", p)
	}
}

// FuzzCheck feeds arbitrary payloads (what a shared topic may carry) to the
// parser: it must never panic, must accept only in-window stamps, and what
// it accepts must re-encode to the same 12 bytes.
func FuzzCheck(f *testing.F) {
	seed := make([]byte, Size)
	Put(seed, Stamp{Seq: 5, SentNs: 1500})
	f.Add(seed)
	f.Add([]byte{})
	f.Add([]byte("not a stamp at all"))
	f.Add(bytes.Repeat([]byte{0xff}, 12))
	w := Window{Total: 100, FromNs: 1000, ToNs: 2000}
	f.Fuzz(func(t *testing.T, p []byte) {
		s, err := w.Check(p)
		if err != nil {
			if !errors.Is(err, ErrShort) && !errors.Is(err, ErrImplausible) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if s.Seq >= w.Total || s.SentNs < w.FromNs || s.SentNs > w.ToNs {
			t.Fatalf("accepted out-of-window stamp %+v", s)
		}
		q := make([]byte, Size)
		Put(q, s)
		if !bytes.Equal(q, p[:Size]) {
			t.Fatalf("re-encode: % x != % x", q, p[:Size])
		}
	})
}
