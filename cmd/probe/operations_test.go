package main

import (
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestDocsOperations runs docs/operations.md's "Try it": the bridge with
// the admin token and its embedded Kafka, a persistent session and a
// retained message, then each curl line, whose answer must say what the
// page says it says; after the two DELETEs the API lists neither.
func TestDocsOperations(t *testing.T) {
	root := repoRootDir(t)
	mqttAddr, httpAddr, kafkaAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	_, mqttPort, _ := net.SplitHostPort(mqttAddr)
	_, kafkaPort, _ := net.SplitHostPort(kafkaAddr)
	sh := shell{t: t, root: root, env: []string{"FERRY_MQTT_LISTEN=" + mqttAddr, "FERRY_HTTP_LISTEN=" + httpAddr,
		"FERRY_KAFKA_EMBEDDED_PORT=" + kafkaPort}}
	subst := strings.NewReplacer("127.0.0.1:8080", httpAddr, "-h 127.0.0.1 ", "-h 127.0.0.1 -p "+mqttPort+" ")
	// What each command's answer must hold, by a piece of the command.
	want := []struct{ cmd, out string }{
		{"/api/v1/instances", `"clients_connected"`},
		{"/api/v1/sessions?prefix=sensor-&connected=false", `"client_id": "sensor-7"`},
		{"DELETE -H 'Authorization: Bearer change-me' 127.0.0.1:8080/api/v1/sessions/sensor-7", `"done": true`},
		{"/api/v1/sessions/sensor-7", `"filter": "devices/7/cmd"`},
		{"/api/v1/clients/sensor-7", `"connected": false`},
		{"/api/v1/route?", `"kafka_topic": "devices_7_temp"`},
		{"/api/v1/retained?prefix=devices/", `"topic": "devices/7/config"`},
		{"DELETE -H 'Authorization: Bearer change-me' 127.0.0.1:8080/api/v1/retained/devices/7/config", `"done": true`},
	}
	lines := sectionCommands(t, root, "docs/operations.md", "Try it")
	ran := 0
	for _, line := range lines {
		switch {
		case strings.HasPrefix(line, "FERRY_HTTP_ADMIN_TOKEN=change-me go run ./cmd/bridge"):
			sh.background(line, func() bool { return httpOK("http://" + httpAddr + "/readyz") })
		case strings.HasPrefix(line, "mosquitto_"):
			sh.run(subst.Replace(line))
		case strings.HasPrefix(line, "curl ") && !strings.Contains(line, "Bearer"):
			if out := sh.run(subst.Replace(line)); !strings.Contains(out, `"error": "missing or wrong bearer token`) {
				t.Fatalf("%s answered %q, want the 401 error", line, out)
			}
		case strings.HasPrefix(line, "curl "):
			out := sh.run(subst.Replace(line))
			found := false
			for _, w := range want {
				if strings.Contains(line, w.cmd) {
					found = true
					if !strings.Contains(out, w.out) {
						t.Fatalf("%s answered\n%s\nwant it to hold %s", line, out, w.out)
					}
					break
				}
			}
			if !found {
				t.Fatalf("docs/operations.md has a curl line this test does not check; say what its answer holds: %q", line)
			}
		default:
			t.Fatalf("docs/operations.md has a command this test does not know; run it here: %q", line)
		}
		ran++
	}
	if ran < 10 {
		t.Fatalf("ran %d commands of docs/operations.md, want the bridge, the two clients and the curl lines", ran)
	}
	// After the DELETEs: no session, no retained message.
	for path, key := range map[string]string{"/api/v1/sessions?prefix=sensor-": "sessions", "/api/v1/retained?prefix=devices/": "retained"} {
		req, err := http.NewRequest("GET", "http://"+httpAddr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer change-me")
		res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]json.RawMessage
		err = json.NewDecoder(res.Body).Decode(&body)
		res.Body.Close()
		var items []json.RawMessage
		if err == nil {
			err = json.Unmarshal(body[key], &items)
		}
		if err != nil || len(items) != 0 {
			t.Fatalf("GET %s after the DELETEs: %s %v, want none", path, body[key], err)
		}
	}
}
