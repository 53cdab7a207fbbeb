package producer

import (
	"os/exec"
	"strings"
	"testing"
)

// The producer knows nothing of MQTT or of the bridge: none of them is
// among its dependencies.
func TestProducerImportsNoMQTT(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/mochi-mqtt/", "github.com/eclipse/paho", "github.com/ferry-bridge/ferry/bridge", "github.com/ferry-bridge/ferry/topicmap"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("producer depends on %s", dep)
			}
		}
	}
}
