//go:build integration

package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/integration/harness"
	"github.com/cri-guard/cri-guard/internal/checkpoint"
	"github.com/cri-guard/cri-guard/internal/pod"
)

// quietConfig is a cri-guard config that listens on nothing but its CRI
// socket (several run at once) and has no PSI trigger (the fake stats have
// none); older builds, run with CRI_GUARD_BIN, accept it too.
const quietConfig = `
psiTrigger: ""
metricsAddress: ""
adminSocket: ""
`

// TestHostileForgedState: cri-guard does not trust its
// state directory too much.
//
//   - a forged record: a static (critical) pod's checkpoint, edited through the
//     checkpoint store (so with a valid checksum) to say the pod is plain and
//     evictable, does not make a restart under pressure stop it: containerd's
//     config of the sandbox says it is static. The BestEffort pod beside it is
//     stopped; the critical one stays ready through several housekeeping passes.
//   - a second cri-guard on the state directory of a running one refuses to
//     start, saying why.
//   - a world-writable or symlinked state directory is warned about.
//   - a 1 GiB (sparse) file named like a record is not read whole at
//     start-up: peak RSS stays small and cri-guard serves.
func TestHostileForgedState(t *testing.T) {
	env := needRuntime(t)
	removePodsAtCleanup(t, env)
	calm := newFakeStats(t) // no pressure, whatever the host's

	t.Run("forged record", func(t *testing.T) {
		run := "forged" + harness.NewUID(t)[:8]
		removeRunAtCleanup(t, env, run)
		stats := newFakeStats(t)
		// restoredPods is left at its default, enforce: restore stops what
		// admission refuses under pressure, then the loop passes every second
		cfg := writeConfig(t, quietConfig+"housekeepingInterval: 1s\nevictionHard: {memory.available: 1Gi}\n")
		gp := newGuardProc(t, env, append(cfg, stats.args()...)...)
		gp.start()

		conn := harness.Dial(t, gp.socket)
		t.Cleanup(func() { conn.Close() })
		rt := runtimeapi.NewRuntimeServiceClient(conn)
		best := runBestEffort(t, rt, run, "besteffort", nil)
		critical := runBestEffort(t, rt, run, "static", map[string]string{pod.AnnotationConfigSource: "file"})

		gp.signal(syscall.SIGTERM)
		forgeNotCritical(t, gp.stateDir, critical)
		if n := foreignReadySandboxes(t, env, run); n > 0 {
			t.Skipf("containerd runs %d ready sandboxes of other tests: a restart under pressure (restoredPods enforce) would adopt and stop them too; run this test alone", n)
		}
		stats.setAvailable(t, 500<<20)
		gp.start() // serves once restore is done

		state := func(id string) runtimeapi.PodSandboxState {
			t.Helper()
			sb, ok := containerdSandboxes(t, env, run)[id]
			if !ok {
				t.Fatalf("containerd no longer has sandbox %s\n%s", id, gp.cur.LogTail())
			}
			return sb.State
		}
		deadline := time.Now().Add(30 * time.Second)
		for state(best) == runtimeapi.PodSandboxState_SANDBOX_READY {
			if time.Now().After(deadline) {
				t.Fatalf("BestEffort sandbox %s still ready 30s after the restart under pressure\n%s", best, gp.cur.LogTail())
			}
			time.Sleep(100 * time.Millisecond)
		}
		// several housekeeping passes (one a second) under pressure, with
		// the static pod the only ready one
		watch := time.Now().Add(5 * time.Second)
		for time.Now().Before(watch) {
			if got := state(critical); got != runtimeapi.PodSandboxState_SANDBOX_READY {
				t.Fatalf("the static (critical) pod's sandbox %s is %s after a restart under pressure: cri-guard stopped it on the word of its forged checkpoint (critical and static cleared, evictable set, checksum valid)\n%s",
					critical, got, gp.cur.LogTail())
			}
			time.Sleep(250 * time.Millisecond)
		}
		b, _ := os.ReadFile(gp.cur.Log)
		t.Logf("BestEffort %s stopped, static %s ready for 5s after; cri-guard said: %s", best, critical,
			grepLines(string(b), "checkpoint disagrees"))
	})

	t.Run("second instance", func(t *testing.T) {
		cfg := append(writeConfig(t, quietConfig), calm.args()...)
		gp := newGuardProc(t, env, cfg...)
		gp.start()
		second := spawnGuard(t, filepath.Join(harness.ShortTempDir(t), "second.sock"),
			append([]string{"--runtime-endpoint", env.Containerd, "--state-dir", gp.stateDir}, cfg...)...)
		served, exited, err := second.ServesOrExits(t, 30*time.Second)
		switch {
		case served:
			t.Errorf("a second cri-guard on the state dir of a running one started and serves on %s: want it refused\n%s", second.Socket, second.LogTail())
		case !exited:
			t.Errorf("a second cri-guard on a used state dir neither served nor exited within 30s\n%s", second.LogTail())
		case err == nil:
			t.Errorf("the second cri-guard on a used state dir exited 0, want a failure\n%s", second.LogTail())
		case !strings.Contains(second.LogTail(), "another cri-guard uses it"):
			t.Errorf("the second cri-guard on a used state dir exited (%v) without saying another uses it:\n%s", err, second.LogTail())
		default:
			t.Logf("second cri-guard refused (%v): %s", err, grepLines(second.LogTail(), "another cri-guard"))
		}
		// the first is untouched
		conn := harness.Dial(t, gp.socket)
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := runtimeapi.NewRuntimeServiceClient(conn).Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
			t.Errorf("the first cri-guard after the second's attempt: Version: %v", err)
		}
	})

	t.Run("untrusted dir", func(t *testing.T) {
		dir := harness.ShortTempDir(t)
		open := filepath.Join(dir, "open")
		if err := os.Mkdir(open, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(open, 0o777); err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dir, "target")
		if err := os.Mkdir(target, 0o700); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(dir, "link")
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct{ name, stateDir, what, says string }{
			{name: "world-writable", stateDir: open, what: "a world-writable (0777) state dir", says: "writable"},
			{name: "symlink", stateDir: link, what: "a state dir that is a symlink", says: "symbolic link"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				g := startGuard(t, env, append(append(writeConfig(t, quietConfig), calm.args()...), "--state-dir", tt.stateDir)...)
				g.Stop(t)
				b, _ := os.ReadFile(g.Log)
				if w := warningsAbout(string(b), tt.stateDir, tt.says); w == "" {
					t.Errorf("cri-guard used %s (%s) without a warning naming it; its warnings:\n%s", tt.what, tt.stateDir, grepLines(string(b), "level=warning"))
				} else {
					t.Logf("warned: %s", w)
				}
			})
		}
	})

	t.Run("huge file", func(t *testing.T) {
		stateDir := filepath.Join(harness.ShortTempDir(t), "state")
		if err := os.Mkdir(stateDir, 0o700); err != nil {
			t.Fatal(err)
		}
		big := filepath.Join(stateDir, harness.NewUID(t)+"_0.json")
		f, err := os.Create(big)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(1 << 30); err != nil { // sparse: no disk used
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		const limit = 200 << 20
		g := startGuard(t, env, append(append(writeConfig(t, quietConfig), calm.args()...), "--state-dir", stateDir)...)
		peak := peakRSS(t, g.Cmd.Process.Pid)
		rt, _ := harness.DialCRI(t, g.Socket)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}); err != nil {
			t.Errorf("ListPodSandbox after start-up with a 1 GiB file in the state dir: %v", err)
		}
		if peak >= limit {
			t.Errorf("peak RSS (VmHWM) %d MiB at start-up with a 1 GiB file named like a record in the state dir, want < %d MiB: it was read whole",
				peak>>20, limit>>20)
		}
		if _, err := os.Stat(big); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the 1 GiB file is still in the state dir (%v), want it quarantined", err)
		}
		t.Logf("peak RSS %.1f MiB with a 1 GiB file in the state dir", float64(peak)/(1<<20))
	})
}

// TestHostileBadRequests: small defects of RunPodSandbox
// through cri-guard in front of containerd.
//
//   - a uid that cannot name a record (300 bytes, "bad/uid", "..") is
//     InvalidArgument, not Internal;
//   - a RunPodSandbox that containerd fails with its own answer (an unknown
//     runtime handler) leaves no pending record behind;
//   - a RunPodSandbox whose connection to containerd breaks after the request
//     reached it keeps its pending record, and the sandbox containerd created
//     meanwhile is completed from it at the next start (not merely adopted).
func TestHostileBadRequests(t *testing.T) {
	env := needRuntime(t)
	removePodsAtCleanup(t, env)
	cfg := append(writeConfig(t, quietConfig), newFakeStats(t).args()...) // no pressure, whatever the host's
	stateDir := filepath.Join(harness.ShortTempDir(t), "state")
	g := startGuard(t, env, slices.Concat(cfg, []string{"--state-dir", stateDir})...)
	rt, _ := harness.DialCRI(t, g.Socket)

	t.Run("invalid uid", func(t *testing.T) {
		for _, tt := range []struct{ name, uid string }{
			{name: "300 bytes", uid: strings.Repeat("u", 300)},
			{name: "slash", uid: "bad/uid"},
			{name: "dot-dot", uid: ".."},
		} {
			t.Run(tt.name, func(t *testing.T) {
				good := harness.NewUID(t)
				pc := qosPodConfig("baduid-"+good[:6], good, "besteffort") // the cgroup parent stays sane
				pc.Metadata.Uid = tt.uid
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc})
				if code := status.Code(err); code != codes.InvalidArgument {
					t.Errorf("RunPodSandbox with uid %s (%d bytes): code %s (%s), want InvalidArgument", shorten(tt.uid), len(tt.uid), code, shorten(status.Convert(err).Message()))
				}
			})
		}
	})

	t.Run("unknown runtime handler", func(t *testing.T) {
		run := "nohandler" + harness.NewUID(t)[:8]
		removeRunAtCleanup(t, env, run)
		const calls = 50
		seen := map[codes.Code]int{}
		var last error
		for i := range calls {
			uid := harness.NewUID(t)
			pc := qosPodConfig(fmt.Sprintf("nohandler-%02d-%s", i, uid[:6]), uid, "besteffort")
			pc.Labels[runLabel] = run
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc, RuntimeHandler: "cri-guard-no-such-handler"})
			cancel()
			if err == nil {
				t.Fatalf("RunPodSandbox with an unknown runtime handler succeeded (call %d)", i)
			}
			seen[status.Code(err)]++
			last = err
		}
		t.Logf("%d calls failed: codes %v; last: %v", calls, seen, last)
		if recs := inspectRun(t, stateDir, run); len(recs) != 0 {
			t.Errorf("%d RunPodSandbox calls that containerd failed (unknown runtime handler) left %d pending records in the state dir, want none", calls, len(recs))
		}
		if n := len(containerdSandboxes(t, env, run)); n != 0 {
			t.Errorf("containerd has %d sandboxes of the failed calls", n)
		}
	})

	t.Run("connection lost mid-call", func(t *testing.T) {
		run := "cut" + harness.NewUID(t)[:8]
		removeRunAtCleanup(t, env, run)
		proxy := newCutProxy(t, env.Containerd)
		gp := newGuardProc(t, env, slices.Concat(cfg, []string{"--runtime-endpoint", proxy.socket})...)
		gp.start()
		conn := harness.Dial(t, gp.socket)
		t.Cleanup(func() { conn.Close() })
		uid := harness.NewUID(t)
		pc := qosPodConfig("cut-"+uid[:6], uid, "besteffort")
		pc.Labels[runLabel] = run
		cut := proxy.arm(uid)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := runtimeapi.NewRuntimeServiceClient(conn).RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc})
		select {
		case <-cut:
		default:
			t.Fatalf("RunPodSandbox ended (%v) before its request reached containerd through the proxy", err)
		}
		if err == nil {
			t.Fatal("RunPodSandbox succeeded although cri-guard's connection to containerd was cut under it")
		}
		t.Logf("RunPodSandbox with its runtime connection cut: %v", err)

		// containerd got the whole request and runs the sandbox
		var id string
		deadline := time.Now().Add(60 * time.Second)
		for id == "" {
			for _, sb := range containerdSandboxes(t, env, run) {
				if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
					id = sb.Id
				}
			}
			if id == "" && time.Now().After(deadline) {
				t.Fatal("containerd did not create the sandbox whose answer was cut within 60s")
			}
			time.Sleep(100 * time.Millisecond)
		}
		proxy.closeCut()

		key := pod.Key(uid, 0)
		if rec, ok := inspectRun(t, gp.stateDir, run)[key]; !ok {
			t.Errorf("the pending record of a RunPodSandbox whose runtime connection broke mid-call was deleted, yet containerd created its sandbox %s: want it kept for reconciliation", id)
		} else if rec.State != pod.StatePending || rec.SandboxID != "" {
			t.Errorf("record after the cut call: state %s, sandbox %q; want pending, no sandbox id", rec.State, rec.SandboxID)
		}

		gp.signal(syscall.SIGTERM)
		gp.start() // restore reconciles the record with containerd
		if rec, ok := inspectRun(t, gp.stateDir, run)[key]; !ok {
			t.Errorf("no record of sandbox %s after the restart: leaked", id)
		} else if rec.State != pod.StateReady || rec.SandboxID != id {
			t.Errorf("record after the restart: state %s, sandbox %q; want ready, %s", rec.State, rec.SandboxID, id)
		}
		if n := gp.restoreTotals()["completed"]; n < 1 {
			t.Errorf("restore completed %d pending records, want the cut call's (the sandbox was adopted instead: its record had been lost)", n)
		}
	})
}

// forgeNotCritical edits, through the checkpoint store (which writes a valid
// checksum), the record of sandboxID in stateDir to call its pod plain:
// not critical, not static, evictable, no config-source annotation. No
// cri-guard may run on stateDir.
func forgeNotCritical(t *testing.T, stateDir, sandboxID string) {
	t.Helper()
	logger := logrus.New()
	logger.SetOutput(io.Discard)
	s, err := checkpoint.New(stateDir, logrus.NewEntry(logger))
	if err != nil {
		t.Fatalf("open the state dir to forge a record: %v", err)
	}
	defer s.Close()
	recs, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.SandboxID != sandboxID {
			continue
		}
		if !r.Pod.Critical || !r.Pod.Static || r.Pod.Evictable {
			t.Fatalf("record of the static pod before forging: critical %v static %v evictable %v, want a critical static pod", r.Pod.Critical, r.Pod.Static, r.Pod.Evictable)
		}
		r.Pod.Critical, r.Pod.Static, r.Pod.Evictable = false, false, true
		delete(r.Pod.Annotations, pod.AnnotationConfigSource)
		if err := s.Put(r); err != nil {
			t.Fatalf("forge record: %v", err)
		}
		return
	}
	t.Fatalf("no record of sandbox %s in %s", sandboxID, stateDir)
}

// inspectRun reads the records of a run (runLabel) beside a running cri-guard.
func inspectRun(t *testing.T, stateDir, run string) map[string]checkpoint.Record {
	t.Helper()
	recs, err := checkpoint.Inspect(stateDir)
	if err != nil {
		t.Fatalf("inspect checkpoints: %v", err)
	}
	out := map[string]checkpoint.Record{}
	for _, r := range recs {
		if r.Pod.Labels[runLabel] == run {
			out[r.Pod.Key()] = r
		}
	}
	return out
}

// warningsAbout returns the warning lines of a cri-guard log that name path
// and say says.
func warningsAbout(log, path, says string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "level=warning") && strings.Contains(l, path) && strings.Contains(l, says) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// peakRSS is a process's peak resident set (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// shorten quotes s, cut to its first 60 bytes.
func shorten(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:60] + "...")
	}
	return strconv.Quote(s)
}

// spawnGuard starts cri-guard on socket with args, its output in a log file
// beside the socket, without waiting for it; at cleanup it is stopped if it
// still runs (SIGTERM, SIGKILL after 15s), whatever its exit.
func spawnGuard(t *testing.T, socket string, args ...string) *harness.Guard {
	t.Helper()
	g := harness.Spawn(t, guardBin, socket, socket+".log", args...)
	t.Cleanup(func() {
		select {
		case <-g.Done():
			return
		default:
		}
		_ = g.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-g.Done():
		case <-time.After(15 * time.Second):
			_ = g.Cmd.Process.Kill()
			<-g.Done()
		}
	})
	return g
}
