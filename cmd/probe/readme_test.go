package main

// The README's Quickstart and reference-test commands, run as written, so
// they cannot drift. The only changes are the addresses: the documented
// defaults (127.0.0.1:1883, :8080, :9092, :21883) become free ports and a
// fresh Kafka of our own, so the test runs beside others on one machine.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
)

// readmeBlocks returns the commands of the ```sh blocks of a README section
// (continuation lines joined), block by block.
func readmeBlocks(t *testing.T, readme []byte, section string) [][]string {
	t.Helper()
	var blocks [][]string
	in, inBlock := false, false
	var cur []string
	var line strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(readme))
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "## "):
			in = l == "## "+section
		case !in:
		case !inBlock && l == "```sh":
			inBlock, cur = true, nil
		case inBlock && l == "```":
			inBlock = false
			blocks = append(blocks, cur)
		case inBlock:
			if c, ok := strings.CutSuffix(l, "\\"); ok {
				line.WriteString(strings.TrimSpace(c) + " ")
				continue
			}
			line.WriteString(strings.TrimSpace(l))
			if s := line.String(); s != "" {
				cur = append(cur, s)
			}
			line.Reset()
		}
	}
	if len(blocks) == 0 {
		t.Fatalf("README.md has no sh code block in section %q", section)
	}
	return blocks
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// shell runs one README command with bash in the repository root.
type shell struct {
	t    *testing.T
	root string
	env  []string
}

func (s shell) cmd(ctx context.Context, line string) (*exec.Cmd, *bytes.Buffer) {
	c := exec.CommandContext(ctx, "bash", "-c", line)
	c.Dir = s.root
	c.Env = append(os.Environ(), s.env...)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // go run's child dies with the group
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	return c, &out
}

// run runs a command to completion; it must exit 0.
func (s shell) run(line string) string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, out := s.cmd(ctx, line)
	s.t.Logf("$ %s", line)
	if err := c.Run(); err != nil {
		s.t.Fatalf("README command failed: %v\n$ %s\n%s", err, line, out)
	}
	return out.String()
}

// background starts a server command and stops its process group when the
// test ends; ready polls until it serves.
func (s shell) background(line string, ready func() bool) {
	s.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c, out := s.cmd(ctx, line)
	s.t.Logf("$ %s &", line)
	if err := c.Start(); err != nil {
		cancel()
		s.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = c.Wait()
		close(exited)
	}()
	s.t.Cleanup(func() {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			cancel()
			<-exited
		}
	})
	deadline := time.Now().Add(3 * time.Minute) // includes go run's build
	for !ready() {
		select {
		case <-exited:
			s.t.Fatalf("README server command exited: %s\n%s", line, out)
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("README server command not ready after 3 minutes: %s\n%s", line, out)
		}
		time.Sleep(100 * time.Millisecond) // polling for readiness
	}
}

func repoRootDir(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func httpOK(url string) bool {
	cl := http.Client{Timeout: time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func accepts(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// TestReadmeQuickstart runs the Quickstart: the bridge with its embedded
// Kafka, then the mosquitto_pub and curl lines, each of which must succeed
// (the grep for the produced-records counter included). scripts/test.sh,
// the whole test suite, is the one line it does not run.
func TestReadmeQuickstart(t *testing.T) {
	root := repoRootDir(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"bash", "go", "mosquitto_pub", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed (scripts/test.sh installs it): %v", tool, err)
		}
	}
	mqttAddr, httpAddr := freeAddr(t), freeAddr(t)
	_, mqttPort, _ := net.SplitHostPort(mqttAddr)
	sh := shell{t: t, root: root, env: []string{"FERRY_MQTT_LISTEN=" + mqttAddr, "FERRY_HTTP_LISTEN=" + httpAddr}}
	subst := strings.NewReplacer("127.0.0.1:8080", httpAddr, "-h 127.0.0.1 ", "-h 127.0.0.1 -p "+mqttPort+" ")
	ran := 0
	for _, block := range readmeBlocks(t, readme, "Quickstart") {
		for _, line := range block {
			switch {
			case strings.HasPrefix(line, "go run ./cmd/bridge"):
				sh.background(line, func() bool { return httpOK("http://" + httpAddr + "/readyz") })
			case strings.HasPrefix(line, "scripts/test.sh"):
				continue
			case strings.HasPrefix(line, "mosquitto_pub"), strings.HasPrefix(line, "curl"):
				sh.run(subst.Replace(line))
			default:
				t.Fatalf("the Quickstart has a command this test does not know; run or skip it here: %q", line)
			}
			ran++
		}
	}
	if ran < 4 {
		t.Fatalf("ran %d Quickstart commands, want the bridge, mosquitto_pub and the curl lines", ran)
	}
}

// TestReadmeReferenceTests runs the Probe section's commands (a bridge in
// the background, reference tests 1 and 2) against a fresh Kafka: no topic
// exists, as on a new machine. Each probe command must exit 0 (3 would be
// lost messages) and write its CSV.
func TestReadmeReferenceTests(t *testing.T) {
	root := repoRootDir(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	kafka := kafkatest.StartBroker(t).Addr
	mqttAddr := freeAddr(t)
	sh := shell{t: t, root: root}
	subst := strings.NewReplacer("127.0.0.1:9092", kafka, "127.0.0.1:21883", mqttAddr)
	var probes int
	for _, block := range readmeBlocks(t, readme, "Probe") {
		for _, line := range block {
			line = subst.Replace(line)
			if bg, ok := strings.CutSuffix(line, "&"); ok {
				sh.background(strings.TrimSpace(bg), func() bool { return accepts(mqttAddr) })
				continue
			}
			if !strings.HasPrefix(line, "go run ./cmd/probe ") {
				t.Fatalf("the Probe section has a command this test does not know: %q", line)
			}
			csv := csvArg(t, line)
			if _, err := os.Stat(filepath.Join(root, csv)); err == nil {
				t.Fatalf("%s exists in the repository root: the README command would overwrite it", csv)
			}
			t.Cleanup(func() { os.Remove(filepath.Join(root, csv)) })
			out := sh.run(line)
			t.Logf("%s", out)
			recs := readCSVFile(t, filepath.Join(root, csv))
			if len(recs) < 2 {
				t.Fatalf("%s: %d CSV lines", csv, len(recs))
			}
			if strings.Contains(line, "kafka-to-mqtt") && !strings.Contains(out, "created by the probe") {
				t.Fatalf("kafka-to-mqtt on a fresh Kafka did not say it created the topic:\n%s", out)
			}
			probes++
		}
	}
	if probes != 2 {
		t.Fatalf("ran %d probe commands, want the two reference tests", probes)
	}
}

func csvArg(t *testing.T, line string) string {
	t.Helper()
	f := strings.Fields(line)
	for i, a := range f {
		if a == "--csv" && i+1 < len(f) {
			return f[i+1]
		}
	}
	t.Fatalf("README probe command without --csv: %q", line)
	return ""
}

func readCSVFile(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(fmt.Errorf("the probe wrote no CSV: %w", err))
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}
