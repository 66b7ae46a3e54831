package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/admin"
)

// Guard is one cri-guard process a test started.
type Guard struct {
	Socket string    // the CRI socket it listens on
	Log    string    // the file its stdout and stderr go to
	Cmd    *exec.Cmd // the process; Cmd.Wait belongs to Guard

	done chan struct{} // closed once the process has exited
	err  error         // its exit, set before done is closed
}

// Spawn starts bin (a cri-guard binary) listening on socket with debug
// logs into the file log, args after those flags, without waiting for it to
// serve and without a cleanup: the caller stops it.
func Spawn(t testing.TB, bin, socket, log string, args ...string) *Guard {
	t.Helper()
	g := &Guard{Socket: socket, Log: log, done: make(chan struct{})}
	logf, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	g.Cmd = exec.Command(bin, append([]string{"--listen", socket, "--log-level", "debug"}, args...)...)
	g.Cmd.Stdout, g.Cmd.Stderr = logf, logf
	if err := g.Cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start cri-guard: %v", err)
	}
	go func() {
		g.err = g.Cmd.Wait()
		logf.Close()
		close(g.done)
	}()
	return g
}

// StartGuard runs bin on a socket in a temporary directory in front of the
// CRI runtime at runtimeEndpoint, with its state there too and extra flags
// after those; it waits until cri-guard answers Version (failing the test
// if it exits or does not within 30s) and stops it at cleanup.
func StartGuard(t testing.TB, bin, runtimeEndpoint string, extra ...string) *Guard {
	t.Helper()
	dir := ShortTempDir(t)
	g := Spawn(t, bin, filepath.Join(dir, "cri-guard.sock"), filepath.Join(dir, "cri-guard.log"),
		append([]string{"--runtime-endpoint", runtimeEndpoint, "--state-dir", filepath.Join(dir, "state")}, extra...)...)
	t.Cleanup(func() { g.Stop(t) })
	served, exited, err := g.ServesOrExits(t, 30*time.Second)
	switch {
	case exited:
		t.Fatalf("cri-guard exited at start-up: %v\n%s", err, g.LogTail())
	case !served:
		t.Fatalf("cri-guard not answering Version after 30s: %v\n%s", err, g.LogTail())
	}
	return g
}

// Done is closed once the process has exited; Err is its exit then.
func (g *Guard) Done() <-chan struct{} { return g.done }

// Err is the process's exit (nil for a clean one), once Done is closed.
func (g *Guard) Err() error {
	<-g.done
	return g.err
}

// ServesOrExits waits at most timeout until g answers Version (served) or
// exits (exited, with its exit in err). When neither happened, err is the
// last Version call's error.
func (g *Guard) ServesOrExits(t testing.TB, timeout time.Duration) (served, exited bool, err error) {
	t.Helper()
	conn := Dial(t, g.Socket)
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-g.done:
			return false, true, g.err
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = rt.Version(ctx, &runtimeapi.VersionRequest{})
		cancel()
		if err == nil {
			return true, false, nil
		}
		if time.Now().After(deadline) {
			return false, false, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// LogTail is the last 4000 bytes of the process's log.
func (g *Guard) LogTail() string {
	b, _ := os.ReadFile(g.Log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Stop sends SIGINT and fails the test unless cri-guard exits cleanly
// within 15s (it is killed then); on a failed test it logs the log's tail.
// A process that already exited is not signalled again.
func (g *Guard) Stop(t testing.TB) {
	if g.Cmd.Process == nil {
		return
	}
	_ = g.Cmd.Process.Signal(os.Interrupt)
	select {
	case <-g.done:
		if g.err != nil && !t.Failed() {
			t.Errorf("cri-guard exit: %v\n%s", g.err, g.LogTail())
		}
	case <-time.After(15 * time.Second):
		_ = g.Cmd.Process.Kill()
		t.Errorf("cri-guard did not stop within 15s of SIGINT\n%s", g.LogTail())
	}
	if t.Failed() {
		t.Logf("cri-guard log tail:\n%s", g.LogTail())
	}
}

// Status runs `cri-guard status --json` of binary bin on the admin socket,
// bounded to 5s (a status that hangs is an error, not a hung test).
func Status(bin, socket string) (admin.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var st admin.Status
	out, err := exec.CommandContext(ctx, bin, "status", "--admin", socket, "--json").Output()
	if ctx.Err() != nil {
		return st, fmt.Errorf("cri-guard status: no answer within 5s")
	}
	if err != nil {
		return st, fmt.Errorf("cri-guard status: %w", err)
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return st, fmt.Errorf("cri-guard status --json: %w", err)
	}
	return st, nil
}
