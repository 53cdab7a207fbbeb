package configs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ferry-bridge/ferry/probe"
)

// docFiles are README.md and docs/*.md, relative to the repository root.
func docFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../README.md"}, docs...)
}

// TestReadmeFitsOneSitting: the README stays short, and says nothing a
// newcomer cannot look up ("issue 17's command" did).
func TestReadmeFitsOneSitting(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n >= 250 {
		t.Errorf("README.md has %d lines; keep it under 250 and move depth into docs/", n)
	}
	for _, f := range docFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if m := regexp.MustCompile(`(?i)\bissue[ -]\d+`).Find(b); m != nil {
			t.Errorf("%s refers to %q: a reader has no issue tracker; say what is meant", f, m)
		}
	}
}

// TestDocsLinksResolve: every relative link of README.md and docs/*.md
// names a file or directory of the repository.
func TestDocsLinksResolve(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)#]+)(#[^)]*)?\)`)
	for _, f := range docFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(f), target)); err != nil {
				t.Errorf("%s links to %s: %v", f, target, err)
			}
		}
	}
}

// TestRepositoryStandsAlone: no tracked file points outside the repository
// (scripts/benchstat.sh and bench/benchkit pointed at ../shared/DESIGN.md).
func TestRepositoryStandsAlone(t *testing.T) {
	out, err := exec.Command("git", "-C", "..", "grep", "-n", "-I", "-F", "-e", "../shared", "-e", "seeds.md", "-e", "DESIGN.md", "--", ".", ":!configs/docs_test.go").CombinedOutput()
	if err == nil {
		t.Fatalf("files refer to documents outside the repository:\n%s", out)
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("git grep: %v %s", err, out)
	}
}

// TestProbeDocListsCSVColumns: docs/probe.md documents every column of the
// probe's CSV, raw and sweep files (they were listed nowhere), each with a
// row of its table.
func TestProbeDocListsCSVColumns(t *testing.T) {
	b, err := os.ReadFile("../docs/probe.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for name, cols := range map[string][]string{"CSV": probe.CSVHeader, "raw": probe.RawHeader, "sweep CSV": probe.SweepCSVHeader} {
		for _, c := range cols {
			if !strings.Contains(doc, "| `"+c+"` |") {
				t.Errorf("docs/probe.md has no table row for the %s column %s", name, c)
			}
		}
	}
}
