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
