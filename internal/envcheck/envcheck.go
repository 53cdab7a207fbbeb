// Package envcheck refuses FERRY_* environment variables that name no
// configuration key (Check), as an unknown key in the YAML file is
// refused, naming the key each probably meant; it lets pass what is not
// Ferry's setting: empty variables, Kubernetes service links and the test
// harness's FERRY_TEST* variables. It never shows a variable's value.
package envcheck

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// k8sServiceLink matches the variables Kubernetes injects into every pod for
// each Service of its namespace (enableServiceLinks): a Service named
// "ferry" or "ferry-mqtt" gives FERRY_PORT, FERRY_MQTT_SERVICE_HOST,
// FERRY_MQTT_PORT_1883_TCP_ADDR and so on. They are not Ferry's settings
// and must not stop a pod.
var k8sServiceLink = regexp.MustCompile(`^FERRY(_[A-Z0-9_]+)?_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_[0-9]+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)?)$`)

// testEnvPrefix is the namespace of Ferry's own test harness variables
// (FERRY_TEST_KAFKA, ...), never configuration.
const testEnvPrefix = "FERRY_TEST"

// Check refuses FERRY_* variables that name no configuration key, like an
// unknown key in the YAML file: a misspelt FERRY_KAFKA_ACK=all would
// otherwise be ignored without a word. Empty variables are ignored (as
// viper ignores them), and so are Kubernetes service links and the test
// harness's FERRY_TEST* variables. keys are the config keys (dotted).
func Check(environ []string, lookup func(string) (string, bool), keys []string) error {
	known := make(map[string]bool, len(keys))
	for _, k := range keys {
		known[envName(k)] = true
	}
	var bad []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "FERRY_") || known[name] || strings.HasPrefix(name, testEnvPrefix) || k8sServiceLink.MatchString(name) {
			continue
		}
		if v, ok := lookup(name); !ok || v == "" {
			continue
		}
		msg := name
		if s := nearest(name, known); s != "" {
			msg += " (did you mean " + s + "?)"
		}
		bad = append(bad, msg)
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	return fmt.Errorf("config: environment variables that are no configuration key: %s (FERRY_ + a key of configs/bridge.yaml in upper case, dots as underscores)", strings.Join(bad, ", "))
}

// envName is the FERRY_* variable of a config key.
func envName(key string) string {
	return "FERRY_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// nearest is the known name closest to name, if it is a likely typo.
func nearest(name string, known map[string]bool) string {
	best, bestD := "", 4
	for k := range known {
		if d := editDistance(name, k); d < bestD || (d == bestD && k < best) {
			best, bestD = k, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
