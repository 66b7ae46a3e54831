package harness

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRepoRoot(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"go.mod", "scripts/rt.sh", "scripts/cluster.sh", "cmd/cri-guard", "tools/memhog"} {
		if _, err := os.Stat(filepath.Join(root, rel)); err != nil {
			t.Errorf("repoRoot() = %s: %v", root, err)
		}
	}
	if got := Script(t, "rt.sh"); got != filepath.Join(root, "scripts", "rt.sh") {
		t.Errorf("Script(rt.sh) = %s, want it under %s", got, root)
	}
}

func TestIsRoot(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name  string
		gomod string
		want  bool
	}{
		{name: "this module", gomod: "module github.com/cri-guard/cri-guard\n\ngo 1.26.0\n", want: true},
		{name: "quoted", gomod: "// a comment\nmodule \"github.com/cri-guard/cri-guard\"\n", want: true},
		{name: "a tool's module", gomod: "module github.com/cri-guard/cri-guard/tools/kubeletdiff\n", want: false},
		{name: "no module line", gomod: "go 1.26.0\n", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, "go.mod")
			if err := os.WriteFile(p, []byte(tt.gomod), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := isRoot(p); got != tt.want {
				t.Errorf("isRoot(%q) = %v, want %v", tt.gomod, got, tt.want)
			}
		})
	}
	if isRoot(filepath.Join(dir, "missing", "go.mod")) {
		t.Error("isRoot of a missing file = true")
	}
}
