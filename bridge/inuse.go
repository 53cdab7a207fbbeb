package bridge

import (
	"errors"
	"syscall"
)

// listenerKey names the setting that moves each listener (for the hint).
var listenerKey = map[string]string{
	"tcp":  "--mqtt-listen ADDR (mqtt.listen)",
	"tls":  "mqtt.tls_listen",
	"ws":   "mqtt.ws_listen",
	"http": "--http-listen ADDR (http.listen)",
}

// inUseHint explains an "address already in use" at the place it happens:
// usually another MQTT broker (a Mosquitto service) or a second Ferry.
func inUseHint(err error, key string) string {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return ""
	}
	return " (another process listens there, e.g. a Mosquitto service or another Ferry: stop it, or choose a free address with " + key + ")"
}
