package session

import (
	"encoding/json"
	"reflect"
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// TestCompactJSON: a session record keeps a client's CONNECT properties
// and Will without their zero fields, and they read back the same.
func TestCompactJSON(t *testing.T) {
	zero, _ := json.Marshal(packets.Properties{})
	if got := compactJSON(zero); got != nil {
		t.Fatalf("all-zero properties compact to %s, want nothing", got)
	}
	props := packets.Properties{ReceiveMaximum: 10, SessionExpiryInterval: 300, SessionExpiryIntervalFlag: true,
		User: []packets.UserProperty{{Key: "k", Val: "v"}}, TopicAliasMaximum: 5}
	will := mqtt.Will{TopicName: "w/t", Payload: []byte("gone"), Qos: 1, Flag: 1, WillDelayInterval: 3}
	for name, c := range map[string]struct{ in, out any }{
		"properties": {props, new(packets.Properties)},
		"will":       {will, new(mqtt.Will)},
	} {
		full, err := json.Marshal(c.in)
		if err != nil {
			t.Fatal(err)
		}
		small := compactJSON(full)
		if len(small) >= len(full) {
			t.Errorf("%s: compact %d bytes, full %d", name, len(small), len(full))
		}
		if err := json.Unmarshal(small, c.out); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := reflect.ValueOf(c.out).Elem().Interface(); !reflect.DeepEqual(got, c.in) {
			t.Errorf("%s: read back %+v, want %+v", name, got, c.in)
		}
		t.Logf("%s: %d bytes, compact %d: %s", name, len(full), len(small), small)
	}
}

// TestPropsJSON: a CONNECT's properties go into the record as compactJSON
// of their encoding; none (an MQTT 3.1.1 client's) cost no encoding at all.
func TestPropsJSON(t *testing.T) {
	if got := propsJSON(packets.Properties{}); got != nil {
		t.Fatalf("no properties: %s, want nothing", got)
	}
	if n := testing.AllocsPerRun(100, func() { propsJSON(packets.Properties{}) }); n != 0 {
		t.Fatalf("no properties: %.0f allocations, want none (encoded anyway)", n)
	}
	for _, p := range []packets.Properties{
		{SessionExpiryInterval: 300, SessionExpiryIntervalFlag: true},
		{User: []packets.UserProperty{{Key: "k", Val: "v"}}},
		{ReceiveMaximum: 10, TopicAliasMaximum: 5, RequestProblemInfoFlag: true},
		{AuthenticationMethod: "x", AuthenticationData: []byte{1}},
	} {
		b, _ := json.Marshal(p.Copy(false))
		if got, want := propsJSON(p), compactJSON(b); string(got) != string(want) {
			t.Errorf("%+v: %s, want %s", p, got, want)
		}
	}
}
