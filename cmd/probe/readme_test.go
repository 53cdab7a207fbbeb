package main

// The commands of README.md and docs/*.md, run as written, so they cannot
// drift. The only changes are the addresses: the documented defaults
// (127.0.0.1:1883, :8080, :9092, :21883) become free ports and a fresh Kafka
// of our own, so the test runs beside others on one machine. Commands that
// cannot run here (Docker, Kubernetes, the whole suite, measurements) are
// listed in docCommands with the reason; any other command fails
// TestDocsCommandsCovered until a test runs it or the list says why not.

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
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-bridge/ferry/internal/kafkatest"
	"github.com/ferry-bridge/ferry/internal/testhelp"
)

// docBlock is one ```sh block of a Markdown file: its section (the last
// "## " heading; "### " headings do not start a new one) and its commands
// (continuation lines joined).
type docBlock struct {
	file, section string
	lines         []string
}

// mdBlocks parses the sh blocks of a Markdown file (path relative to the
// repository root).
func mdBlocks(t *testing.T, root, file string) []docBlock {
	t.Helper()
	md, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []docBlock
	section, inBlock := "", false
	var cur []string
	var line strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(md))
	for sc.Scan() {
		l := sc.Text()
		switch {
		case !inBlock && strings.HasPrefix(l, "## "):
			section = strings.TrimPrefix(l, "## ")
		case !inBlock && l == "```sh":
			inBlock, cur = true, nil
		case inBlock && l == "```":
			inBlock = false
			blocks = append(blocks, docBlock{file: file, section: section, lines: cur})
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
	return blocks
}

// sectionCommands returns the commands of the sh blocks of one section.
func sectionCommands(t *testing.T, root, file, section string) []string {
	t.Helper()
	var out []string
	for _, b := range mdBlocks(t, root, file) {
		if b.section == section {
			out = append(out, b.lines...)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no sh code block in section %q", file, section)
	}
	return out
}

// docCommand matches commands of one file (and section, "" any) by prefix.
type docCommand struct {
	file, section, prefix string
	how                   string // "run by TestX" or "not run: reason"
}

// docCommands says, for every command of the documents, which test runs
// it, or why none can. A command matches the first entry of its file
// whose section and prefix match.
var docCommands = []docCommand{
	{"README.md", "Quickstart", "", "run by TestReadmeQuickstart"},
	{"README.md", "What next: both directions", "", "run by TestReadmeQuickstart"},
	{"README.md", "The probe: two reference runs", "", "run by TestReadmeReferenceTests"},
	{"docs/configuration.md", "Mistakes stop Ferry before it starts", "", "run by TestDocsCheckConfig"},
	{"docs/operations.md", "Try it", "", "run by TestDocsOperations"},
	{"docs/testing.md", "", "scripts/test.sh", "not run: the whole test suite itself (CI runs it)"},
	{"docs/scale.md", "", "FERRY_TEST_KAFKA=127.0.0.1:9092 ", "not run: a test of the suite (TestIdleConnectionMemory), run by scripts/test.sh"},
	{"docs/probe.md", "Round trip through Kafka, per hop", "go run ./cmd/probe ", "run by TestDocsRoundtripHops"},
	{"docs/probe.md", "Throughput run", "go run ./cmd/probe ", "not run: a load run (a measurement, see docs/benchmarks.md)"},
	{"docs/deployment.md", "", "docker ", "not run: no Docker engine here; configs/configs_test.go checks docker-compose.yml, the Dockerfile and the compose table"},
	{"docs/deployment.md", "", "mosquitto_pub ", "not run: needs the compose setup (no Docker engine here); the same command is run by TestReadmeQuickstart"},
	{"docs/deployment.md", "", "kcat ", "not run: needs the compose setup (no Docker engine here); the same read is run by TestReadmeQuickstart"},
	{"docs/deployment.md", "", "kubectl ", "not run: no Kubernetes cluster here; configs/deploy_test.go checks the manifests"},
}

// TestDocsCommandsCovered: every command in README.md and docs/*.md is run
// by a test or says why it cannot be.
func TestDocsCommandsCovered(t *testing.T) {
	root := repoRootDir(t)
	files := []string{"README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		files = append(files, rel)
	}
	n := 0
	for _, f := range files {
		for _, b := range mdBlocks(t, root, f) {
			for _, line := range b.lines {
				n++
				i := slices.IndexFunc(docCommands, func(c docCommand) bool {
					return c.file == f && (c.section == "" || c.section == b.section) && strings.HasPrefix(line, c.prefix)
				})
				if i < 0 {
					t.Errorf("%s, section %q: no test runs %q; run it in cmd/probe/readme_test.go or say in docCommands why it cannot run", f, b.section, line)
				}
			}
		}
	}
	if n < 20 {
		t.Fatalf("found %d commands in README.md and docs/: the parser no longer finds them", n)
	}
}

func freeAddr(t *testing.T) string { return testhelp.FreeAddr(t) }

// shell runs one README command with bash in the repository root.
type shell struct {
	t    *testing.T
	root string
	env  []string
}

func (s shell) cmd(ctx context.Context, line string) (*exec.Cmd, *lockedBuffer) {
	c := exec.CommandContext(ctx, "bash", "-c", line)
	c.Dir = s.root
	c.Env = append(os.Environ(), s.env...)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // go run's child dies with the group
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	out := new(lockedBuffer)
	c.Stdout, c.Stderr = out, out
	return c, out
}

// lockedBuffer is an output buffer read while the command still writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
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
// test ends; ready polls until it serves. It returns the command's output.
func (s shell) background(line string, ready func() bool) *lockedBuffer {
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
	return out
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

// TestReadmeQuickstart runs the Quickstart and "What next": the bridge with
// its embedded Kafka, mosquitto_pub and the curl lines, then reads the
// message back with kcat, and sends a record the other way: kcat produces
// to the reverse topic, the backgrounded mosquitto_sub must print it.
func TestReadmeQuickstart(t *testing.T) {
	root := repoRootDir(t)
	for _, tool := range []string{"bash", "go", "mosquitto_pub", "mosquitto_sub", "kcat", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed (scripts/test.sh installs it): %v", tool, err)
		}
	}
	mqttAddr, httpAddr, kafkaAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	_, mqttPort, _ := net.SplitHostPort(mqttAddr)
	_, kafkaPort, _ := net.SplitHostPort(kafkaAddr)
	sh := shell{t: t, root: root, env: []string{"FERRY_MQTT_LISTEN=" + mqttAddr, "FERRY_HTTP_LISTEN=" + httpAddr,
		"FERRY_KAFKA_EMBEDDED_PORT=" + kafkaPort}}
	subst := strings.NewReplacer("127.0.0.1:8080", httpAddr, "127.0.0.1:9092", kafkaAddr,
		"-h 127.0.0.1 ", "-h 127.0.0.1 -p "+mqttPort+" ")
	lines := append(sectionCommands(t, root, "README.md", "Quickstart"), sectionCommands(t, root, "README.md", "What next: both directions")...)
	var sub *lockedBuffer
	ran := 0
	for _, line := range lines {
		switch {
		case strings.HasPrefix(line, "go run ./cmd/bridge"):
			sh.background(line, func() bool { return httpOK("http://" + httpAddr + "/readyz") })
		case strings.HasPrefix(line, "mosquitto_pub"), strings.HasPrefix(line, "curl"):
			sh.run(subst.Replace(line))
		case strings.HasPrefix(line, "kcat ") && strings.Contains(line, " -C "):
			if out := sh.run(subst.Replace(line)); !strings.Contains(out, "hello") {
				t.Fatalf("kcat read back %q, want the published hello", out)
			}
		case strings.HasPrefix(line, "mosquitto_sub") && strings.HasSuffix(line, "&"):
			bg := strings.TrimSpace(strings.TrimSuffix(subst.Replace(line), "&"))
			sub = sh.background(bg, func() bool { return metric(httpAddr, "ferry_mqtt_connections") >= 1 })
		case strings.HasPrefix(line, "echo ") && strings.Contains(line, "| kcat ") && strings.Contains(line, " -P "):
			if sub == nil {
				t.Fatalf("%q produces before any mosquitto_sub runs", line)
			}
			sh.run(subst.Replace(line))
			payload := strings.Trim(strings.TrimPrefix(strings.SplitN(line, "|", 2)[0], "echo "), " '")
			deadline := time.Now().Add(30 * time.Second)
			for !strings.Contains(sub.String(), payload) {
				if time.Now().After(deadline) {
					t.Fatalf("mosquitto_sub did not print %q within 30 s; it printed %q", payload, sub.String())
				}
				time.Sleep(100 * time.Millisecond) // polling the subscriber's output
			}
		default:
			t.Fatalf("the Quickstart has a command this test does not know; run it here: %q", line)
		}
		ran++
	}
	if ran < 7 {
		t.Fatalf("ran %d Quickstart commands, want the bridge, mosquitto_pub, curl, kcat both ways and mosquitto_sub", ran)
	}
}

// metric reads one unlabelled series from /metrics (-1 when unreadable).
func metric(httpAddr, name string) float64 {
	cl := http.Client{Timeout: time.Second}
	resp, err := cl.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return f
			}
		}
	}
	return -1
}

// TestReadmeReferenceTests runs the README's reference runs (a bridge in
// the background, reference tests 1 and 2) against a fresh Kafka: no topic
// exists, as on a new machine. Each probe command must exit 0 (3 would be
// lost messages) and write its CSV into a directory git ignores (they went
// to the repository root).
func TestReadmeReferenceTests(t *testing.T) {
	root := repoRootDir(t)
	kafka := kafkatest.StartBroker(t).Addr
	mqttAddr := freeAddr(t)
	// The bridge's HTTP listener on a free port too: 127.0.0.1:8080 may be taken
	// (a test of another package running at the same time took it once).
	sh := shell{t: t, root: root, env: []string{"FERRY_HTTP_LISTEN=" + freeAddr(t)}}
	subst := strings.NewReplacer("127.0.0.1:9092", kafka, "127.0.0.1:21883", mqttAddr)
	var probes int
	for _, line := range sectionCommands(t, root, "README.md", "The probe: two reference runs") {
		line = subst.Replace(line)
		if bg, ok := strings.CutSuffix(line, "&"); ok {
			sh.background(strings.TrimSpace(bg), func() bool { return accepts(mqttAddr) })
			continue
		}
		if !strings.HasPrefix(line, "go run ./cmd/probe ") {
			t.Fatalf("the reference runs have a command this test does not know: %q", line)
		}
		csv := csvArg(t, line)
		if out, err := exec.Command("git", "-C", root, "check-ignore", "-q", csv).CombinedOutput(); err != nil {
			t.Fatalf("the README writes %s, which git does not ignore (%v %s): a user's run would leave an untracked file", csv, err, out)
		}
		keep(t, filepath.Join(root, csv))
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
	if probes != 2 {
		t.Fatalf("ran %d probe commands, want the two reference tests", probes)
	}
}

// keep moves an existing file (a user's earlier run) aside and puts it back
// when the test ends; a file the test wrote is removed.
func keep(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		aside := path + ".readme-test"
		if err := os.Rename(path, aside); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Rename(aside, path) })
		return
	}
	t.Cleanup(func() { os.Remove(path) })
}

// TestDocsCheckConfig runs docs/configuration.md's --check-config lines:
// each must say "config ok".
func TestDocsCheckConfig(t *testing.T) {
	root := repoRootDir(t)
	sh := shell{t: t, root: root}
	lines := sectionCommands(t, root, "docs/configuration.md", "Mistakes stop Ferry before it starts")
	for _, line := range lines {
		if !strings.Contains(line, "go run ./cmd/bridge --check-config") {
			t.Fatalf("docs/configuration.md has a command this test does not know: %q", line)
		}
		if out := sh.run(line); !strings.Contains(out, "config ok") {
			t.Fatalf("%s printed %q, want config ok", line, out)
		}
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
