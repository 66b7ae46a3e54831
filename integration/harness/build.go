package harness

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BuildGuard builds cmd/cri-guard of the checkout into out with the shipped
// build tags (the Makefile's BUILD_TAGS) and the race detector, its output
// on stderr.
func BuildGuard(out string) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "build", "-race", "-tags", "grpcnotrace", "-o", out, "./cmd/cri-guard")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}

// BuildMemhog builds tools/memhog (static) into a temporary directory and
// returns its path.
func BuildMemhog(t testing.TB) string {
	t.Helper()
	hog := filepath.Join(ShortTempDir(t), "memhog")
	build := exec.Command("go", "build", "-o", hog, "./tools/memhog")
	build.Dir = Path(t, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build memhog: %v\n%s", err, out)
	}
	return hog
}
