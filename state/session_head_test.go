package state

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// fullSession is a record with every field set.
func fullSession() *Session {
	return &Session{Client: "dev-1", Owner: "ferry-b", Epoch: 1764720000123, Connected: false,
		Disconnected: 1764720001000, Clean: true, Expiry: 7200, ProtocolVersion: 5, Username: []byte("alice"),
		Listener: "tcp", Props: json.RawMessage(`{"rm":10}`), Will: json.RawMessage(`{"t":"w","p":"eA=="}`),
		WillBy: "ferry-c",
		Subs:   []Subscription{{Filter: "x/#", QoS: 1, Since: 1764710000000}, {Filter: "y/+", QoS: 2, NoLocal: true}},
		Positions: []Position{{Topic: "_x_a", Partition: 0, Offset: 41, Delivered: 42},
			{Topic: "_x_b", Partition: 3, Offset: 7}},
		Horizon: 1764710000000,
		Pending: []Pending{{PacketID: 9, Topic: "_x_a", Partition: 0, Offset: 41}},
	}
}

// TestDecodeSessionHeadReadsTheHead: the head of a record is what the
// whole decode says for its head fields, and nothing else is set; the
// head's fields carry Session's own JSON names.
func TestDecodeSessionHeadReadsTheHead(t *testing.T) {
	b, err := fullSession().Encode()
	if err != nil {
		t.Fatal(err)
	}
	full, err := DecodeSession(b)
	if err != nil {
		t.Fatal(err)
	}
	head, err := DecodeSessionHead(b)
	if err != nil {
		t.Fatal(err)
	}
	ht := reflect.TypeOf(sessionHead{})
	want := Session{}
	fv, wv := reflect.ValueOf(full).Elem(), reflect.ValueOf(&want).Elem()
	for i := range ht.NumField() {
		hf := ht.Field(i)
		sf, ok := reflect.TypeOf(Session{}).FieldByName(hf.Name)
		if !ok {
			t.Fatalf("sessionHead.%s is no field of Session", hf.Name)
		}
		if name := func(tag string) string { return strings.Split(tag, ",")[0] }; name(hf.Tag.Get("json")) != name(sf.Tag.Get("json")) {
			t.Errorf("sessionHead.%s is %q in JSON, Session.%s %q", hf.Name, hf.Tag.Get("json"), sf.Name, sf.Tag.Get("json"))
		}
		wv.FieldByName(hf.Name).Set(fv.FieldByName(hf.Name))
	}
	if !reflect.DeepEqual(*head, want) {
		t.Errorf("head of a record:\n got %+v\nwant %+v", *head, want)
	}
	if head.Owner != "ferry-b" || head.Epoch != 1764720000123 || head.WillBy != "ferry-c" || head.Expiry != 7200 {
		t.Errorf("head %+v lost a field the record has", *head)
	}
	b[strings.Index(string(b), `"v":1`)+4] = '9'
	if _, err := DecodeSessionHead(b); err == nil {
		t.Error("a record of another version decoded")
	}
}

func BenchmarkDecodeSession(b *testing.B) {
	v, err := fullSession().Encode()
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		decode func([]byte) (*Session, error)
	}{{"whole", DecodeSession}, {"head", DecodeSessionHead}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.decode(v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// headByJSON is DecodeSessionHead by encoding/json alone (what it was
// before scanHead).
func headByJSON(b []byte) (*Session, error) {
	var h sessionHead
	if err := decodeVersioned(b, &h, &h.Version, &h.Client); err != nil {
		return nil, err
	}
	return &Session{Version: h.Version, Client: h.Client, Owner: h.Owner, Epoch: h.Epoch, Connected: h.Connected,
		Disconnected: h.Disconnected, Clean: h.Clean, Expiry: h.Expiry, WillBy: h.WillBy, Username: h.Username}, nil
}

// headSeeds are records Encode writes, and JSON that is not quite theirs.
func headSeeds(f interface{ Add(...any) }) {
	full, _ := fullSession().Encode()
	f.Add(full)
	bare, _ := (&Session{Client: "c", Owner: "o", Epoch: 1, Connected: true, Expiry: 4294967295}).Encode()
	f.Add(bare)
	for _, s := range []string{
		`{"v":1,"client":"a\"b","owner":"x"}`, `{"v":1,"Owner":"X","owner":"y"}`, `{"v":1,"owner":"y","owner":"z"}`,
		`{"v":1,"epoch":1.5}`, `{"v":1,"epoch":-3,"expiry":4294967296}`, `{"v":1,"connected":null}`,
		`{"v":1,"client":"é\u00e9"}`, "{\"v\":1,\"client\":\"\xff\"}", ` { "v" : 1 , "subs" : [ {"filter":"]}\"" } ] } `,
		`{"v":1,"props":{"a":[1,{"b":"}"}]},"will_by":"w"}`, `{"v":1,"username":"YQ"}`, `{"v":1,"username":""}`,
		`{"v":1,"username":null}`, `{"v":1,"username":"YWxp\nY2U="}`, `{"v":2}`, `{}`, `[]`, `{"v":1}x`, `{"v":01}`,
	} {
		f.Add([]byte(s))
	}
}

// TestDecodeSessionHeadAsJSON: the head of every seed is what
// encoding/json reads of it (or both refuse it).
func TestDecodeSessionHeadAsJSON(t *testing.T) {
	var seeds [][]byte
	headSeeds(addFunc(func(v ...any) { seeds = append(seeds, v[0].([]byte)) }))
	for _, b := range seeds {
		checkHeadAsJSON(t, b)
	}
	// A head member's number is read as JSON has it (strconv alone would
	// take these).
	for _, b := range []string{`{"v":01}`, `{"v":+1}`, `{"v":1,"epoch":01}`, `{"v":1,"expiry":+7}`} {
		if _, err := DecodeSessionHead([]byte(b)); err == nil {
			t.Errorf("%s: decoded", b)
		}
	}
}

type addFunc func(...any)

func (f addFunc) Add(v ...any) { f(v...) }

func checkHeadAsJSON(t *testing.T, b []byte) {
	t.Helper()
	got, gerr := DecodeSessionHead(b)
	want, werr := headByJSON(b)
	if (gerr == nil) != (werr == nil) {
		if gerr == nil && !json.Valid(b) {
			return // a member scanHead steps over is not checked
		}
		t.Fatalf("%q: error %v, encoding/json %v", b, gerr, werr)
	}
	if gerr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\n got %+v\nwant %+v", b, *got, *want)
	}
}

// FuzzScanHead: wherever DecodeSessionHead answers for valid JSON,
// encoding/json answers the same (go test -fuzz FuzzScanHead ./state/).
func FuzzScanHead(f *testing.F) {
	headSeeds(f)
	f.Fuzz(checkHeadAsJSON)
}
