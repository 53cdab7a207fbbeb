package envcheck

import (
	"strings"
	"testing"
)

// TestCheck: a misspelt variable is refused by name with the key it
// probably meant, never its value; known keys, empty variables,
// Kubernetes service links and FERRY_TEST* pass. (Through the config
// loader: TestUnknownEnvRefused and TestEnvAllowed, package bridge.)
func TestCheck(t *testing.T) {
	keys := []string{"kafka.acks", "mqtt.listen"}
	env := map[string]string{"FERRY_KAFKA_ACKS": "all", "FERRY_MQTT_LISTEN": "", "FERRY_MQTT_SERVICE_HOST": "10.0.0.1",
		"FERRY_PORT_1883_TCP_ADDR": "10.0.0.1", "FERRY_TEST_KAFKA": "k:9092", "FERRY_UNRELATED_THING": ""}
	environ := func() []string {
		var out []string
		for k, v := range env {
			out = append(out, k+"="+v)
		}
		return out
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if err := Check(environ(), lookup, keys); err != nil {
		t.Fatalf("refused: %v", err)
	}
	env["FERRY_KAFKA_ACK"] = "secret"
	err := Check(environ(), lookup, keys)
	if err == nil || !strings.Contains(err.Error(), "FERRY_KAFKA_ACK (did you mean FERRY_KAFKA_ACKS?)") {
		t.Fatalf("FERRY_KAFKA_ACK: %v, want it named with the key it meant", err)
	}
	if strings.Contains(err.Error(), "secret") {
		t.Fatalf("error %q shows the value", err)
	}
}
