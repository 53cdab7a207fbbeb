package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/ferry-bridge/ferry/bridge"
)

// mainArgsEnv makes the test binary act as the bridge command: TestMain runs
// main() with these arguments (separated by \x1f) so that real exit codes
// can be checked.
const mainArgsEnv = "FERRY_TEST_MAIN_ARGS" // FERRY_TEST*: never taken for configuration

func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(mainArgsEnv); ok {
		os.Args = append([]string{"bridge"}, strings.Split(args, "\x1f")...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runMain runs the bridge command in a subprocess and returns its exit code
// and stderr.
func runMain(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), mainArgsEnv+"="+strings.Join(args, "\x1f"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), stdout.String(), stderr.String()
	}
	t.Fatalf("running bridge %v: %v", args, err)
	return -1, "", ""
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCheckConfigExitCodes(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr []string // substrings of the error message
	}{
		{name: "example config", args: []string{"--check-config", "--config", "../../configs/bridge.yaml"}, code: 0, stdout: "config ok"},
		{name: "no config file", args: []string{"--check-config"}, code: 0, stdout: "config ok"},
		{name: "unknown key", args: []string{"--check-config", "--config", writeFile(t, "typo.yaml", "kafka:\n  ack: all\n")},
			code: 1, stderr: []string{"ack"}},
		{name: "bad value", args: []string{"--check-config", "--config", writeFile(t, "bad.yaml", "kafka:\n  compression: brotli\n")},
			code: 1, stderr: []string{"kafka.compression", "brotli"}},
		{name: "missing file", args: []string{"--check-config", "--config", filepath.Join(t.TempDir(), "nope.yaml")},
			code: 1, stderr: []string{"nope.yaml"}},
		{name: "open listener without auth", args: []string{"--check-config", "--mqtt-listen", "0.0.0.0:1883"},
			code: 1, stderr: []string{"mqtt.listen", "allow_anonymous: true"}},
		{name: "unknown flag", args: []string{"--check-config", "--kafak", "x:1"}, code: 1, stderr: []string{"kafak"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runMain(t, tt.args...)
			if code != tt.code {
				t.Fatalf("exit code %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, stdout, stderr)
			}
			if tt.stdout != "" && !strings.Contains(stdout, tt.stdout) {
				t.Errorf("stdout %q, want %q", stdout, tt.stdout)
			}
			for _, s := range tt.stderr {
				if !strings.Contains(stderr, s) {
					t.Errorf("stderr %q does not contain %q", stderr, s)
				}
			}
		})
	}
}

// TestRunCheckConfig calls run directly for every example config.
func TestRunCheckConfig(t *testing.T) {
	// tls-auth.yaml takes the Kafka SASL password from the environment,
	// as documented (a SASL mechanism without a password is refused).
	t.Setenv("FERRY_KAFKA_SASL_PASSWORD", "from-the-environment")
	files, err := filepath.Glob("../../configs/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example configs found: %v", err)
	}
	for _, f := range files {
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), []string{"--check-config", "--config", f}, &stdout, &stderr); err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if strings.TrimSpace(stdout.String()) != "config ok" {
			t.Errorf("%s: stdout %q, want \"config ok\"", f, stdout.String())
		}
	}
	var stdout, stderr bytes.Buffer
	err = run(context.Background(), []string{"--check-config", "--config", writeFile(t, "x.yaml", "nope: 1\n")}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("unknown key: got %v, want an error naming \"nope\"", err)
	}
}

// TestApplyRuntimeGCPercent: runtime.gc_percent becomes the process's GC
// target, unless GOGC is set in the environment (then nothing changes).
func TestApplyRuntimeGCPercent(t *testing.T) {
	orig := debug.SetGCPercent(100)
	defer debug.SetGCPercent(orig)
	noEnv := func(string) (string, bool) { return "", false }
	if _, applied := applyRuntime(bridge.RuntimeConfig{GCPercent: 400}, noEnv); !applied {
		t.Fatal("runtime.gc_percent not applied without GOGC")
	}
	if got := debug.SetGCPercent(100); got != 400 {
		t.Fatalf("GC percent after applyRuntime(400) = %d, want 400", got)
	}
	withGOGC := func(k string) (string, bool) { return "150", k == "GOGC" }
	if _, applied := applyRuntime(bridge.RuntimeConfig{GCPercent: 400}, withGOGC); applied {
		t.Fatal("runtime.gc_percent applied although GOGC is set")
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GC percent changed to %d with GOGC set", got)
	}
}
