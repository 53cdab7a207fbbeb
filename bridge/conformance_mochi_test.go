//go:build mochibug

// Conformance tests that fail because of mochi-mqtt v2.7.9 itself, where
// Ferry's layer cannot fix it cleanly (README, MQTT support, known gaps):
//
//	go test -tags mochibug -run 'TestConformanceMochi' ./bridge/

package bridge

import (
	"strings"
	"testing"
)

// TestConformanceMochiResendOrder: MQTT 5 4.6 Message ordering. "When the
// Server re-sends any PUBLISH packets, it MUST re-send them in the order in
// which the original PUBLISH packets were sent" [MQTT-4.6.0-1], and "it MUST
// send PUBLISH packets to consumers (for the same Topic and QoS) in the
// order that they were received from any given Client" [MQTT-4.6.0-6]; a
// PUBLISH sent for the first time has DUP 0 (3.3.1.1: "If the DUP flag is
// set to 0, it indicates that this is the first occasion that the Client or
// Server has attempted to send this PUBLISH packet").
//
// mochi resends a resumed session's inflight messages (which include those
// queued while the client was away) from Inflight.GetAll (inflight.go
// ~74-90): a map sorted by uint16(Created), Created being Unix seconds, so
// messages of the same second come in random order (and the order breaks
// when the truncated seconds wrap, every ~18 h); ResendInflightMessages
// (clients.go ~304-311) sets DUP 1 on every one, also on messages never sent.
func TestConformanceMochiResendOrder(t *testing.T) {
	_, resumed := offlineQueue(t, testConfig(""))
	var order []string
	for _, p := range resumed {
		order = append(order, string(p.Payload))
		if string(p.Payload) != "unacked" && p.FixedHeader.Dup {
			t.Errorf("%q was never sent before, but has DUP 1", p.Payload)
		}
	}
	if strings.Join(order, ",") != "unacked,q1,q2" {
		t.Errorf("resent in the order %v, want [unacked q1 q2]", order)
	}
}
