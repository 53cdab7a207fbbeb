package layout

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
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
