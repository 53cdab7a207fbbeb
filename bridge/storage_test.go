package bridge

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

func storeClient(srv *mqtt.Server, id string, clean bool) *mqtt.Client {
	cl := srv.NewClient(nil, "t", id, false)
	cl.Properties.ProtocolVersion = 4
	cl.Properties.Clean = clean
	return cl
}

func qos1(pid uint16, topic, payload string) packets.Packet {
	return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: pid,
		TopicName: topic, Payload: []byte(payload), Created: time.Now().Unix()}
}

// TestStoreReopen: what a persistent session leaves in the store comes back
// after a reopen: client, subscription, unacknowledged messages in delivery
// order (not packet-id or key order) with their sequences, and retained
// messages (a cleared one stays cleared). Clean sessions leave nothing.
func TestStoreReopen(t *testing.T) {
	dir := t.TempDir()
	srv := mqtt.New(&mqtt.Options{})
	order := newInflightOrder(srv)
	st, err := openStore(dir, storeModeGroup, testLogger(t), order)
	if err != nil {
		t.Fatal(err)
	}
	cl := storeClient(srv, "dev1", false)
	st.OnSessionEstablished(cl, packets.Packet{})
	st.OnSubscribed(cl, packets.Packet{Filters: packets.Subscriptions{{Filter: "cmd/#", Qos: 1}}}, []byte{1})
	for i := range 10 { // packet ids descending: order must come from the sequence
		pk := qos1(uint16(200-i), "cmd/x", fmt.Sprint(i))
		order.OnQosPublish(cl, pk, 0, 0)
		st.OnQosPublish(cl, pk, 0, 0)
	}
	if err := st.sync(); err != nil { // half before the sync, half after (buffered)
		t.Fatal(err)
	}
	acked := qos1(197, "cmd/x", "3")
	st.OnQosComplete(cl, acked)
	order.OnQosComplete(cl, acked)
	st.OnRetainMessage(cl, qos1(0, "ret/keep", "kept"), 1)
	st.OnRetainMessage(cl, qos1(0, "ret/clear", "gone"), 1)
	st.OnRetainMessage(cl, qos1(0, "ret/clear", ""), -1)
	clean := storeClient(srv, "clean1", true)
	st.OnSessionEstablished(clean, packets.Packet{})
	st.OnQosPublish(clean, qos1(1, "cmd/x", "c"), 0, 0)
	if err := st.Stop(); err != nil {
		t.Fatal(err)
	}

	order2 := newInflightOrder(srv)
	st2, err := openStore(dir, storeModeGroup, testLogger(t), order2)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Stop()
	clients, _ := st2.StoredClients()
	if len(clients) != 1 || clients[0].ID != "dev1" || clients[0].Clean {
		t.Fatalf("clients %+v, want the persistent dev1 only", clients)
	}
	subs, _ := st2.StoredSubscriptions()
	if len(subs) != 1 || subs[0].Client != "dev1" || subs[0].Filter != "cmd/#" || subs[0].Qos != 1 {
		t.Fatalf("subscriptions %+v", subs)
	}
	msgs, _ := st2.StoredInflightMessages()
	var got []string
	for _, m := range msgs {
		got = append(got, string(m.Payload))
	}
	if want := []string{"0", "1", "2", "4", "5", "6", "7", "8", "9"}; !slices.Equal(got, want) {
		t.Fatalf("in-flight after reopen %q, want %q (delivery order, the acknowledged one gone)", got, want)
	}
	if s0, s9 := order2.seqOf("dev1", 200), order2.seqOf("dev1", 191); s0 == 0 || s9 <= s0 {
		t.Fatalf("restored sequences %d, %d", s0, s9)
	}
	ret, _ := st2.StoredRetainedMessages()
	if len(ret) != 1 || ret[0].TopicName != "ret/keep" || string(ret[0].Payload) != "kept" {
		t.Fatalf("retained %+v, want ret/keep only", ret)
	}
	// An expired session is forgotten entirely.
	st2.OnDisconnect(storeClient(srv, "dev1", false), nil, true)
	clients, _ = st2.StoredClients()
	subs, _ = st2.StoredSubscriptions()
	msgs, _ = st2.StoredInflightMessages()
	if len(clients)+len(subs)+len(msgs) != 0 {
		t.Fatalf("after expiry: %d clients, %d subscriptions, %d in-flight", len(clients), len(subs), len(msgs))
	}
}

// TestInflightOrderRenumber: messages created in the same second come back
// from mochi's Inflight.GetAll (sorted by uint16(Created)) in delivery order
// once renumbered, also where the renumbered range would cross a multiple of
// 65536.
func TestInflightOrderRenumber(t *testing.T) {
	for _, now := range []int64{time.Now().Unix(), 65536*30000 + 5} {
		srv := mqtt.New(&mqtt.Options{})
		o := newInflightOrder(srv)
		cl := storeClient(srv, "dev", false)
		const n = 300
		for i := range n {
			pk := qos1(uint16(1000-i), "t", fmt.Sprint(i))
			pk.Created = now - 1
			cl.State.Inflight.Set(pk)
			o.OnQosPublish(cl, pk, 0, 0)
		}
		o.renumber(cl, now)
		all := cl.State.Inflight.GetAll(false)
		for i, pk := range all {
			if string(pk.Payload) != fmt.Sprint(i) {
				t.Fatalf("now=%d: position %d holds message %s", now, i, pk.Payload)
			}
			if pk.Created >= now || now-pk.Created > 2*n+1 {
				t.Fatalf("now=%d: renumbered Created %d out of [now-2n-1, now)", now, pk.Created)
			}
		}
	}
}

// TestStoreSyncWritesTheBuffer: in-flight messages are buffered between
// syncs, and sync() puts them in the database files. The files are copied as
// a crash would leave them (the store still open) and opened as a copy.
func TestStoreSyncWritesTheBuffer(t *testing.T) {
	dir := t.TempDir()
	srv := mqtt.New(&mqtt.Options{})
	order := newInflightOrder(srv)
	st, err := openStore(dir, storeModeGroup, testLogger(t), order)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Stop()
	cl := storeClient(srv, "dev1", false)
	st.OnSessionEstablished(cl, packets.Packet{})
	for i := range 10 {
		pk := qos1(uint16(i+1), "cmd/x", fmt.Sprint(i))
		order.OnQosPublish(cl, pk, 0, 0)
		st.OnQosPublish(cl, pk, 0, 0)
	}
	inflightInCopy := func() int {
		cp := t.TempDir()
		if err := os.CopyFS(cp, os.DirFS(dir)); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(cp, "LOCK")); err != nil {
			t.Fatal(err)
		}
		c, err := openStore(cp, storeModeGroup, testLogger(t), newInflightOrder(srv))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Stop()
		msgs, err := c.StoredInflightMessages()
		if err != nil {
			t.Fatal(err)
		}
		return len(msgs)
	}
	if n := inflightInCopy(); n != 0 {
		t.Fatalf("%d in-flight messages on disk before the sync, want 0 (buffered)", n)
	}
	if err := st.sync(); err != nil {
		t.Fatal(err)
	}
	if n := inflightInCopy(); n != 10 {
		t.Fatalf("%d in-flight messages on disk after the sync, want 10", n)
	}
}
