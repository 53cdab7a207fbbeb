package bridge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ferry-bridge/ferry/admin"
	"github.com/ferry-bridge/ferry/internal/kafkatest"
)

// adminCall makes one admin API request to p with token ("" for none)
// and decodes the JSON answer into out (nil: not decoded); it returns the
// status, and fails the test when the body is not JSON.
func adminCall(t *testing.T, p *ferryProcess, token, method, path string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+p.HTTPAddr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	cl := http.Client{Timeout: 20 * time.Second}
	res, err := cl.Do(req)
	if err != nil {
		t.Fatalf("%s %s on %s: %v", method, path, p.name, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s %s on %s: %s with Content-Type %q: %s", method, path, p.name, res.Status, ct, body)
	}
	var any map[string]any
	if err := json.Unmarshal(body, &any); err != nil {
		t.Fatalf("%s %s on %s: %s, not a JSON object: %s", method, path, p.name, res.Status, body)
	}
	if res.StatusCode >= 400 && any["error"] == "" {
		t.Fatalf("%s %s on %s: %s without an error message: %s", method, path, p.name, res.Status, body)
	}
	if out != nil && res.StatusCode < 400 {
		if err := json.Unmarshal(body, out); err != nil {
			t.Fatalf("%s %s on %s: %v: %s", method, path, p.name, err, body)
		}
	}
	return res.StatusCode
}

// TestAdminAPIAcrossInstances runs the admin API against three cmd/bridge
// processes on the real Kafka: each lists the three; a client connected to
// b is found through a and disconnected through a (MQTT 5: DISCONNECT
// 0x98, within 2 s); a session is listed through a with its lag after
// messages were queued for it, and ended through c; a retained message is
// cleared through a and no instance serves it; requests without the token,
// with a wrong one, and with a bad path get 401 / 404 with a JSON error;
// the route of an MQTT topic is what the forward path writes, and the
// route of that Kafka topic leads back to it.
func TestAdminAPIAcrossInstances(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	token := "tok-" + randHex(8)
	run := randHex(3)
	env := func(inst string) []string {
		return []string{"FERRY_KAFKA_BROKERS=" + brokers, "FERRY_INSTANCE_ID=adm" + inst + "-" + run,
			"FERRY_HTTP_ADMIN_TOKEN=" + token, "FERRY_STATE_HEARTBEAT_INTERVAL=500ms", "FERRY_STATE_INSTANCE_LAPSE=5s"}
	}
	a := startFerry(t, "a", "", env("a")...)
	b := startFerry(t, "b", "", env("b")...)
	c := startFerry(t, "c", "", env("c")...)
	defer func() {
		if t.Failed() {
			for _, p := range []*ferryProcess{a, b, c} {
				t.Logf("%s's log:\n%s", p.name, p.stderr.String())
			}
		}
	}()
	ids := map[*ferryProcess]string{a: "adma-" + run, b: "admb-" + run, c: "admc-" + run}

	// Access: 401 without the token or with a wrong one, 404 for a bad
	// path, each with a JSON error.
	for _, tc := range []struct {
		token, path string
		code        int
	}{{"", "/api/v1/instances", 401}, {token + "x", "/api/v1/instances", 401}, {"x" + token, "/api/v1/sessions", 401},
		{token, "/api/v1/nothing-here", 404}, {token, "/api/v1/sessions/no-such-" + run, 404}} {
		if code := adminCall(t, a, tc.token, "GET", tc.path, nil); code != tc.code {
			t.Errorf("GET %s (token %q): %d, want %d", tc.path, tc.token, code, tc.code)
		}
	}

	// Instances: each lists the three, with their HTTP addresses.
	for _, p := range []*ferryProcess{a, b, c} {
		waitFor(t, 15*time.Second, p.name+" lists the three instances", func() bool {
			var res struct{ Instances []admin.Instance }
			if adminCall(t, p, token, "GET", "/api/v1/instances", &res) != 200 {
				return false
			}
			found := 0
			for _, in := range res.Instances {
				for q, id := range ids {
					if in.ID == id && in.HTTP == q.HTTPAddr && in.MQTT["tcp"] == q.MQTTAddr {
						found++
					}
				}
			}
			return found == 3
		})
	}

	t.Run("disconnect", func(t *testing.T) {
		id := "adm-kick-" + run
		reason := make(chan byte, 1)
		var gone time.Time
		connectV5(t, b.MQTTAddr, id, func(cc *paho.ClientConfig, cp *paho.Connect) {
			cc.OnServerDisconnect = func(d *paho.Disconnect) {
				gone = time.Now()
				reason <- d.ReasonCode
			}
			cc.OnClientError = func(error) {}
			cp.CleanStart = false
			cp.Properties = &paho.ConnectProperties{SessionExpiryInterval: ptr[uint32](600)}
		})
		var cli admin.Client
		if code := adminCall(t, a, token, "GET", "/api/v1/clients/"+id, &cli); code != 200 {
			t.Fatalf("GET client through a: %d", code)
		}
		if !cli.Connected || cli.Instance != ids[b] || cli.Protocol != 5 || cli.Remote == "" || cli.Keepalive != 30 || cli.ConnectedSince == nil {
			t.Fatalf("client through a: %+v; want connected to %s, protocol 5, its remote address, keepalive 30, connected since", cli, ids[b])
		}
		start := time.Now()
		var res admin.ActionResult
		if code := adminCall(t, a, token, "POST", "/api/v1/clients/"+id+"/disconnect", &res); code != 200 || !res.Done || res.Instance != ids[b] {
			t.Fatalf("POST disconnect through a: %d %+v", code, res)
		}
		select {
		case r := <-reason:
			if r != 0x98 {
				t.Fatalf("DISCONNECT reason %#x, want 0x98 Administrative action", r)
			}
			if took := gone.Sub(start); took > 2*time.Second {
				t.Fatalf("the client got its DISCONNECT %s after the request, want within 2 s", took)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the client got no DISCONNECT within 5 s")
		}
		waitFor(t, 10*time.Second, "the client is not connected", func() bool {
			var cli admin.Client
			return adminCall(t, c, token, "GET", "/api/v1/clients/"+id, &cli) == 200 && !cli.Connected
		})
		if code := adminCall(t, a, token, "POST", "/api/v1/clients/"+id+"/disconnect", nil); code != 404 {
			t.Fatalf("POST disconnect of a client not connected: %d, want 404", code)
		}
	})

	t.Run("disconnect 3.1.1", func(t *testing.T) {
		// MQTT 3.1.1 has no DISCONNECT from the server (3.14: sent from
		// the client to the server): its connection is closed, nothing
		// written to it.
		id := "adm-kick311-" + run
		conn := rawConn(t, c.MQTTAddr)
		var connect bytes.Buffer
		cp := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 4,
			Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Keepalive: 30, ClientIdentifier: id}}
		if err := cp.ConnectEncode(&connect); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write(connect.Bytes()); err != nil {
			t.Fatal(err)
		}
		connack := make([]byte, 4)
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(conn, connack); err != nil || connack[0] != 0x20 || connack[3] != 0 {
			t.Fatalf("CONNACK %x: %v", connack, err)
		}
		var res admin.ActionResult
		if code := adminCall(t, a, token, "POST", "/api/v1/clients/"+id+"/disconnect", &res); code != 200 || !res.Done || res.Instance != ids[c] {
			t.Fatalf("POST disconnect through a: %d %+v", code, res)
		}
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		rest, err := io.ReadAll(conn)
		if len(rest) != 0 || err != nil {
			t.Fatalf("the 3.1.1 client read %x (%v) after the disconnect, want its connection closed with nothing written", rest, err)
		}
	})

	t.Run("session lag and end", func(t *testing.T) {
		id := "adm-sess-" + run
		topic := "ferrytest/adm/" + run + "/q"
		in := newInbox()
		persistent := func(_ *paho.ClientConfig, cp *paho.Connect) {
			cp.CleanStart = false
			cp.Properties = &paho.ConnectProperties{SessionExpiryInterval: ptr[uint32](600)}
		}
		sub := v5Sub(t, a.MQTTAddr, id, in, persistent)
		mustSubscribe(t, sub, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}})
		// Published on a (another instance delivers only what its reverse
		// path reads; none here), queued from c.
		mustPublish(t, connectV5(t, a.MQTTAddr, "adm-pub1-"+run), &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("first")})
		pub := connectV5(t, c.MQTTAddr, "adm-pub-"+run)
		in.wait(t, 1, 10*time.Second)
		if err := sub.Disconnect(&paho.Disconnect{}); err != nil {
			t.Fatal(err)
		}
		// Its lag once offline: 0, or 1 when paho's PUBACK of the first
		// message did not leave before its DISCONNECT.
		var before admin.Session
		waitFor(t, 10*time.Second, "the session is offline", func() bool {
			return adminCall(t, b, token, "GET", "/api/v1/sessions/"+id, &before) == 200 && !before.Connected && len(before.Partitions) == 1
		})
		const queued = 5
		for i := range queued {
			mustPublish(t, pub, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte(fmt.Sprintf("q%d", i))})
		}
		var s admin.Session
		waitFor(t, 10*time.Second, "the session's lag is what was queued", func() bool {
			return adminCall(t, b, token, "GET", "/api/v1/sessions/"+id, &s) == 200 && s.Lag == before.Lag+queued
		})
		if len(s.Subscriptions) != 1 || s.Subscriptions[0].Filter != topic || s.Owner != ids[a] || s.ExpiresAt == nil {
			t.Fatalf("session through b: %+v; want its subscription, owner %s, an expiry", s, ids[a])
		}
		var list struct {
			Sessions []admin.SessionItem
			Next     string
		}
		q := url.Values{"prefix": {"adm-sess-" + run}, "connected": {"false"}}
		if code := adminCall(t, a, token, "GET", "/api/v1/sessions?"+q.Encode(), &list); code != 200 || len(list.Sessions) != 1 ||
			list.Sessions[0].ClientID != id || list.Sessions[0].Connected || list.Sessions[0].Owner != ids[a] {
			t.Fatalf("listing through a: %d %+v", code, list)
		}
		var res admin.ActionResult
		if code := adminCall(t, c, token, "DELETE", "/api/v1/sessions/"+id, &res); code != 200 || !res.Done {
			t.Fatalf("DELETE session through c: %d %+v", code, res)
		}
		for _, p := range []*ferryProcess{a, b, c} {
			if code := adminCall(t, p, token, "GET", "/api/v1/sessions/"+id, nil); code != 404 {
				t.Fatalf("GET the ended session through %s: %d, want 404", p.name, code)
			}
		}
		_, ca := dialV5(t, b.MQTTAddr, paho.ClientConfig{ClientID: id}, &paho.Connect{ClientID: id, KeepAlive: 30,
			Properties: &paho.ConnectProperties{SessionExpiryInterval: ptr[uint32](600)}})
		if ca.SessionPresent {
			t.Fatal("a resume after the session was ended: Session Present 1, want 0")
		}
	})

	t.Run("end a connected session", func(t *testing.T) {
		id := "adm-end-" + run
		reason := make(chan byte, 1)
		connectV5(t, c.MQTTAddr, id, func(cc *paho.ClientConfig, cp *paho.Connect) {
			cc.OnServerDisconnect = func(d *paho.Disconnect) { reason <- d.ReasonCode }
			cc.OnClientError = func(error) {}
			cp.CleanStart = false
			cp.Properties = &paho.ConnectProperties{SessionExpiryInterval: ptr[uint32](600)}
		})
		var res admin.ActionResult
		if code := adminCall(t, a, token, "DELETE", "/api/v1/sessions/"+id, &res); code != 200 || !res.Done {
			t.Fatalf("DELETE connected session through a: %d %+v", code, res)
		}
		select {
		case r := <-reason:
			if r != 0x98 {
				t.Fatalf("DISCONNECT reason %#x, want 0x98", r)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the client got no DISCONNECT")
		}
		if code := adminCall(t, b, token, "GET", "/api/v1/sessions/"+id, nil); code != 404 {
			t.Fatalf("GET the ended session: %d, want 404", code)
		}
	})

	t.Run("retained", func(t *testing.T) {
		topic := "ferrytest/adm/" + run + "/cfg"
		pub := connectV5(t, b.MQTTAddr, "adm-rpub-"+run)
		mustPublish(t, pub, &paho.Publish{Topic: topic, QoS: 1, Retain: true, Payload: []byte("secret-payload")})
		for _, p := range []*ferryProcess{a, b, c} {
			waitFor(t, 10*time.Second, p.name+" lists the retained message", func() bool {
				var res struct{ Retained []admin.RetainedItem }
				return adminCall(t, p, token, "GET", "/api/v1/retained?prefix="+url.QueryEscape(topic), &res) == 200 &&
					len(res.Retained) == 1 && res.Retained[0].Topic == topic && res.Retained[0].Size == len("secret-payload") && res.Retained[0].QoS == 1
			})
		}
		// The read endpoints never show a payload.
		req, _ := http.NewRequest("GET", "http://"+a.HTTPAddr+"/api/v1/retained?prefix="+url.QueryEscape(topic), nil)
		req.Header.Set("Authorization", "Bearer "+token)
		if res, err := http.DefaultClient.Do(req); err != nil {
			t.Fatal(err)
		} else {
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if strings.Contains(string(body), "secret-payload") || strings.Contains(string(body), "c2VjcmV0LXBheWxvYWQ") {
				t.Fatalf("the retained listing shows the payload: %s", body)
			}
		}
		var res admin.ActionResult
		if code := adminCall(t, a, token, "DELETE", "/api/v1/retained/"+topic, &res); code != 200 || !res.Done {
			t.Fatalf("DELETE retained through a: %d %+v", code, res)
		}
		for _, p := range []*ferryProcess{a, b, c} {
			waitFor(t, 10*time.Second, p.name+" lists no retained message", func() bool {
				var res struct{ Retained []admin.RetainedItem }
				return adminCall(t, p, token, "GET", "/api/v1/retained?prefix="+url.QueryEscape(topic), &res) == 200 && len(res.Retained) == 0
			})
			// A new subscriber gets no retained message before the marker,
			// published after its SUBACK. (A subscription's topics are read
			// from a moment before it, docs/sessions.md: the messages
			// published a second ago may come live, retain not set.)
			in := newInbox()
			sub := v5Sub(t, p.MQTTAddr, "adm-rsub-"+p.name+run, in)
			mustSubscribe(t, sub, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}})
			local := connectV5(t, p.MQTTAddr, "adm-rmark-"+p.name+run)
			mustPublish(t, local, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("marker-" + p.name)})
			for n := 1; ; n++ {
				got := in.wait(t, n, 10*time.Second)[n-1]
				// Earlier messages of the topic (the cleared one, another
				// instance's marker) may come live too, never retained.
				if got.Retain || n > 4 || string(got.Payload) != "secret-payload" && !strings.HasPrefix(string(got.Payload), "marker-") {
					t.Fatalf("%s served %q (retain %v) to a new subscriber, want the marker first", p.name, got.Payload, got.Retain)
				}
				if string(got.Payload) == "marker-"+p.name {
					break
				}
			}
		}
		if code := adminCall(t, c, token, "DELETE", "/api/v1/retained/"+topic, nil); code != 404 {
			t.Fatalf("DELETE a cleared retained message: %d, want 404", code)
		}
	})

	t.Run("route", func(t *testing.T) {
		topic := "ferrytest/adm/" + run + "/route"
		client := "adm-route-" + run
		var rt admin.Route
		q := url.Values{"mqtt_topic": {topic}, "qos": {"1"}, "retain": {"true"}, "client_id": {client}}
		if code := adminCall(t, a, token, "GET", "/api/v1/route?"+q.Encode(), &rt); code != 200 || rt.KafkaTopic == "" {
			t.Fatalf("route of %s: %d %+v", topic, code, rt)
		}
		pub := connectV5(t, a.MQTTAddr, client) // the route is what the instance asked writes (ferry.origin)
		mustPublish(t, pub, &paho.Publish{Topic: topic, QoS: 1, Retain: true, Payload: []byte("r")})
		recs := readTopic(t, strings.Split(brokers, ","), rt.KafkaTopic, 1, 20*time.Second)
		if string(recs[0].Key) != rt.Key {
			t.Fatalf("record key %q, route said %q", recs[0].Key, rt.Key)
		}
		var written, said []string
		for _, h := range recs[0].Headers {
			v := string(h.Value)
			if h.Key == "mqtt.packet_id" || h.Key == "ferry.seq" {
				v = "(own)"
			}
			written = append(written, h.Key+"="+v)
		}
		for _, h := range rt.Headers {
			v := h.Value
			if h.Key == "mqtt.packet_id" || h.Key == "ferry.seq" {
				v = "(own)"
			}
			said = append(said, h.Key+"="+v)
		}
		if strings.Join(written, " ") != strings.Join(said, " ") {
			t.Fatalf("record headers\n%v\nroute said\n%v", written, said)
		}
		var back admin.Route
		if code := adminCall(t, c, token, "GET", "/api/v1/route?kafka_topic="+url.QueryEscape(rt.KafkaTopic), &back); code != 200 || back.MQTTTopic != topic {
			t.Fatalf("route of Kafka topic %s: %d %+v, want MQTT topic %s", rt.KafkaTopic, code, back, topic)
		}
	})
}
