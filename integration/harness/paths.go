package harness

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// modulePath is the module whose go.mod marks the checkout's root.
const modulePath = "github.com/cri-guard/cri-guard"

// repoRoot returns the root of the cri-guard checkout the tests run in: the
// nearest directory at or above the working directory (go test runs a
// package's tests in its directory) whose go.mod declares modulePath. The
// modules under tools/ declare others and are passed over.
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repository root: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if isRoot(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		if dir == filepath.Dir(dir) {
			return "", fmt.Errorf("find repository root: no go.mod of %s at or above %s", modulePath, wd)
		}
	}
}

// isRoot reports whether the go.mod at path declares modulePath.
func isRoot(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) == 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`) == modulePath
		}
	}
	return false
}

// Path returns the absolute path of rel (slash-separated, relative to the
// checkout's root), or fails the test.
func Path(t testing.TB, rel string) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, filepath.FromSlash(rel))
}

// Script returns the absolute path of scripts/name, or fails the test.
func Script(t testing.TB, name string) string {
	t.Helper()
	p := Path(t, "scripts/"+name)
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// RunScript runs scripts/name with bash and args and returns its output
// (stdout and stderr); a non-zero exit fails the test with that output.
func RunScript(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command("bash", append([]string{Script(t, name)}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}
