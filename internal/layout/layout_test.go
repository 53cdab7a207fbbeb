package layout

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/ferry-bridge/ferry"

type pkg struct {
	ImportPath string
	Name       string
	Doc        string
	Imports    []string
}

// packages lists the module's packages with go list (non-test imports).
func packages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Name,Doc,Imports", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 5 {
		t.Fatalf("go list found %d packages of %s: not run from the module?", len(pkgs), module)
	}
	return pkgs
}

func rel(path string) string { return strings.TrimPrefix(strings.TrimPrefix(path, module), "/") }

// TestImportRules: the package graph keeps its direction.
func TestImportRules(t *testing.T) {
	// Packages that must not import an MQTT library: they are about Kafka,
	// queues or routing, and the bridge gives them what they need.
	noMQTT := map[string]bool{"producer": true, "ringbuffer": true, "state": true, "topicmap": true}
	mqttLibs := []string{"github.com/mochi-mqtt/", "github.com/eclipse/paho"}
	for _, p := range packages(t) {
		from := rel(p.ImportPath)
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module) {
				if noMQTT[from] {
					for _, lib := range mqttLibs {
						if strings.HasPrefix(imp, lib) {
							t.Errorf("%s imports %s: it must know nothing of MQTT", from, imp)
						}
					}
				}
				continue
			}
			to := rel(imp)
			switch {
			case to == "bridge" && from != "cmd/bridge":
				t.Errorf("%s imports bridge: only cmd/bridge may (bridge wires the others; they must not reach back)", from)
			case strings.HasPrefix(to, "cmd/"):
				t.Errorf("%s imports the command %s", from, to)
			case strings.HasPrefix(to, "bench/") && !strings.HasPrefix(from, "bench/"):
				t.Errorf("%s imports the benchmark package %s", from, to)
			}
		}
	}
}

// TestPackageDocs: every package states its job in a package comment.
func TestPackageDocs(t *testing.T) {
	for _, p := range packages(t) {
		if p.Name == "main" {
			if !strings.HasPrefix(p.Doc, "Command ") {
				t.Errorf("%s: no \"// Command x ...\" comment saying what the command does (got %q)", rel(p.ImportPath), p.Doc)
			}
			continue
		}
		if !strings.HasPrefix(p.Doc, "Package "+p.Name+" ") {
			t.Errorf("%s: no \"// Package %s ...\" comment (got %q)", rel(p.ImportPath), p.Name, p.Doc)
		}
	}
}

// TestPackageSizes: no package grows back into the one that holds
// everything. Counted as the layout's targets are: non-test Go lines,
// cmd/, bench/ and internal/ left out of the total; no package above 30%
// of it, bridge/ (the wiring) at most 4,000 lines.
func TestPackageSizes(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Dir}} {{join .GoFiles \",\"}}", module+"/...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	lines := map[string]int{}
	total := 0
	for _, row := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(row)
		if len(f) < 3 {
			continue
		}
		name := rel(f[0])
		if strings.HasPrefix(name, "cmd/") || strings.HasPrefix(name, "bench/") || strings.HasPrefix(name, "internal/") {
			continue
		}
		for _, file := range strings.Split(f[2], ",") {
			b, err := os.ReadFile(filepath.Join(f[1], file))
			if err != nil {
				t.Fatal(err)
			}
			n := bytes.Count(b, []byte("\n"))
			lines[name] += n
			total += n
		}
	}
	for name, n := range lines {
		if share := float64(n) / float64(total); share > 0.30 {
			t.Errorf("%s holds %d of %d non-test lines (%.0f%%): more than 30%% of the project", name, n, total, 100*share)
		}
	}
	if n := lines["bridge"]; n > 4000 {
		t.Errorf("bridge/ has %d non-test lines, more than 4,000: what is not wiring belongs in a package of its own", n)
	}
	t.Logf("non-test lines: %d in all; bridge %d, session %d, producer %d, reverse %d", total, lines["bridge"], lines["session"], lines["producer"], lines["reverse"])
}
