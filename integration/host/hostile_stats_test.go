//go:build integration

package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/integration/harness"
	"github.com/cri-guard/cri-guard/internal/admin"
	"github.com/cri-guard/cri-guard/internal/testutil"
)

// The hostile-host tests against the real
// binary in front of the harness containerd: stats files that block or
// break, and SIGHUP reloads under pressure. Each wait is bounded, so that a
// build with the defect (CRI_GUARD_BIN) fails with the item named instead
// of hanging.

// hostileNamespace is the namespace of these tests' pods. Every other
// namespace with a ready sandbox on containerd when a test starts is made
// critical (critical.namespaces): cri-guard adopts those sandboxes and must
// not evict them under the pressure the test fakes.
const hostileNamespace = "cri-guard-hostile"

// hostileBound separates "answers" from "hangs": the old build's hangs are
// forever, the new build's answers take milliseconds.
const hostileBound = 10 * time.Second

// hostileGuard is a cri-guard with an admin socket and a metrics address.
type hostileGuard struct {
	*harness.Guard
	env     harness.Runtime
	admin   string
	metrics string
}

// startHostileGuard starts cri-guard on the fake stats with the given
// config lines (YAML, at top level), plus housekeeping every 250ms, no PSI
// trigger, the admin socket, the metrics address and the critical
// namespaces of the sandboxes already on containerd.
func startHostileGuard(t *testing.T, env harness.Runtime, stats *fakeStats, yaml string) *hostileGuard {
	t.Helper()
	h := &hostileGuard{env: env, admin: filepath.Join(harness.ShortTempDir(t), "admin.sock"), metrics: testutil.FreeAddr(t)}
	var quoted []string
	for _, ns := range foreignNamespaces(t, env) {
		quoted = append(quoted, strconv.Quote(ns))
	}
	cfg := writeConfig(t, strings.TrimSpace(yaml)+`
housekeepingInterval: 250ms
psiTrigger: ""
metricsAddress: `+h.metrics+`
adminSocket: `+h.admin+`
critical: {namespaces: [`+strings.Join(quoted, ", ")+`]}
`)
	h.Guard = startGuard(t, env, append(cfg, stats.args()...)...)
	// runs before startGuard's cleanup (SIGINT, 15 s): a cri-guard that
	// hangs is killed at once when the test has failed
	t.Cleanup(func() {
		if t.Failed() && !h.exited() {
			if _, err := h.terminate(2 * time.Second); err != nil {
				t.Logf("at cleanup: %v", err)
			}
		}
	})
	return h
}

// foreignNamespaces lists the namespaces of the ready sandboxes on
// containerd that are not hostileNamespace.
func foreignNamespaces(t *testing.T, env harness.Runtime) []string {
	t.Helper()
	rt, _ := harness.DialCRI(t, env.Containerd)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}},
	})
	if err != nil {
		t.Fatalf("list sandboxes on containerd: %v", err)
	}
	var out []string
	for _, sb := range resp.Items {
		if ns := sb.GetMetadata().GetNamespace(); ns != "" && ns != hostileNamespace && !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	slices.Sort(out)
	return out
}

// hostilePod is a BestEffort pod in hostileNamespace.
func hostilePod(name, uid string) *runtimeapi.PodSandboxConfig {
	c := qosPodConfig(name+"-"+uid[:6], uid, "besteffort")
	c.Metadata.Namespace = hostileNamespace
	return c
}

// runPod calls RunPodSandbox through cri-guard, bounded by hostileBound,
// and returns the sandbox id, how long the answer took and the error.
func (h *hostileGuard) runPod(t *testing.T, cfg *runtimeapi.PodSandboxConfig) (string, time.Duration, error) {
	t.Helper()
	rt, _ := harness.DialCRI(t, h.Socket)
	ctx, cancel := context.WithTimeout(context.Background(), hostileBound)
	defer cancel()
	start := time.Now()
	resp, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	return resp.GetPodSandboxId(), time.Since(start), err
}

// status runs `cri-guard status --json` on the admin socket, bounded.
func (h *hostileGuard) status() (admin.Status, error) { return harness.Status(guardBin, h.admin) }

// mustStatus is status that fails the test on an error.
func (h *hostileGuard) mustStatus(t *testing.T) admin.Status {
	t.Helper()
	st, err := h.status()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// scrape GETs the metrics page, bounded.
func (h *hostileGuard) scrape() (string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + h.metrics + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = errors.New(resp.Status)
	}
	return string(b), err
}

// metric returns the value of the series name{labels} (labels as rendered,
// e.g. `signal="memory.available"`, or "" for a series without labels).
func metric(page, name, labels string) (float64, bool) {
	sel := regexp.QuoteMeta(name)
	if labels != "" {
		sel += `\{` + regexp.QuoteMeta(labels) + `\}`
	}
	m := regexp.MustCompile(`(?m)^` + sel + ` ([0-9.e+-]+)$`).FindStringSubmatch(page)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	return v, err == nil
}

// terminate sends SIGTERM and waits up to bound for the exit, then
// SIGKILLs. It returns how long the exit took; an error when cri-guard had
// to be killed or exited with an error. The exit stays readable for
// guard.stop.
func (h *hostileGuard) terminate(bound time.Duration) (time.Duration, error) {
	start := time.Now()
	_ = h.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.Done():
		if err := h.Err(); err != nil {
			return time.Since(start), fmt.Errorf("cri-guard exit after SIGTERM: %w", err)
		}
		return time.Since(start), nil
	case <-time.After(bound):
		_ = h.Cmd.Process.Kill()
		<-h.Done()
		return time.Since(start), fmt.Errorf("cri-guard did not exit within %s of SIGTERM (killed)", bound)
	}
}

// exited reports whether the process has ended.
func (h *hostileGuard) exited() bool {
	select {
	case <-h.Done():
		return true
	default:
		return false
	}
}

// logCount counts the lines of cri-guard's log that contain msg.
func (h *hostileGuard) logCount(msg string) int {
	b, _ := os.ReadFile(h.Log)
	return strings.Count(string(b), msg)
}

// sandboxState is the sandbox's state as containerd reports it.
func (h *hostileGuard) sandboxState(id string) string {
	out, err := h.env.CrictlErr(h.env.Containerd, "inspectp", "-o", "go-template", "--template", "{{.status.state}}", id)
	if err != nil {
		return "error: " + err.Error()
	}
	return out
}

// waitUntil polls cond every 50ms until it holds or timeout passes; it
// returns cond's last note and whether it held.
func waitUntil(timeout time.Duration, cond func() (bool, string)) (string, bool) {
	deadline := time.Now().Add(timeout)
	for {
		ok, note := cond()
		if ok {
			return note, true
		}
		if time.Now().After(deadline) {
			return note, false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// signalOf finds a signal in a status document.
func signalOf(st admin.Status, name string) (admin.Signal, bool) {
	for _, s := range st.Signals {
		if s.Signal == name {
			return s, true
		}
	}
	return admin.Signal{}, false
}

// replaceWithFIFO puts a FIFO where path is, in one rename.
func replaceWithFIFO(t *testing.T, path string) {
	t.Helper()
	tmp := path + ".fifo"
	if err := syscall.Mkfifo(tmp, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestHostileStatsFIFO: a FIFO replaces meminfo under a
// running cri-guard. A read of it blocks forever; before the fix it blocked
// the sync loop, so RunPodSandbox ended in DeadlineExceeded, nothing was
// logged or counted and SIGTERM did not end the process. Now:
// RunPodSandbox is answered, status and metrics show the stats error, a
// regular meminfo put back is picked up, SIGTERM ends cri-guard.
func TestHostileStatsFIFO(t *testing.T) {
	env := needRuntime(t)
	removePodsAtCleanup(t, env)
	stats := newFakeStats(t)
	h := startHostileGuard(t, env, stats, `evictionHard: {memory.available: 100Mi}`)
	if note, ok := waitUntil(hostileBound, func() (bool, string) {
		st, err := h.status()
		return err == nil && !st.SampledAt.IsZero() && st.StatsError == "", fmt.Sprintf("%+v %v", st.StatsError, err)
	}); !ok {
		t.Fatalf("no good sample before the FIFO: %s", note)
	}
	page, err := h.scrape()
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	errorsBefore, _ := metric(page, "cri_guard_stats_errors_total", "")

	meminfo := filepath.Join(stats.proc, "meminfo")
	replaceWithFIFO(t, meminfo)
	// a pass on the FIFO (bounded: the old build's status never shows it)
	waitUntil(hostileBound, func() (bool, string) {
		st, err := h.status()
		return err == nil && st.StatsError != "", ""
	})

	uid := harness.NewUID(t)
	id, took, err := h.runPod(t, hostilePod("fifo", uid))
	t.Logf("RunPodSandbox with a FIFO at meminfo answered in %v: %v (code %s, sandbox %q)", took.Round(time.Millisecond), err, status.Code(err), id)
	if status.Code(err) == codes.DeadlineExceeded {
		t.Errorf("RunPodSandbox through cri-guard not answered within %s with a FIFO at meminfo: the stats read blocks the sync loop", hostileBound)
	}

	st, err := h.status()
	switch {
	case err != nil:
		t.Errorf("status with a FIFO at meminfo: %v", err)
	case !strings.Contains(st.StatsError, "meminfo"):
		t.Errorf("status with a FIFO at meminfo shows stats error %q, want the meminfo read's error", st.StatsError)
	default:
		t.Logf("status: stats error %q", st.StatsError)
	}
	if page, err := h.scrape(); err != nil {
		t.Errorf("metrics with a FIFO at meminfo: %v", err)
	} else {
		n, _ := metric(page, "cri_guard_stats_errors_total", "")
		gauge, _ := metric(page, "cri_guard_stats_error", "")
		if n <= errorsBefore || gauge != 1 {
			t.Errorf("with a FIFO at meminfo cri_guard_stats_errors_total %v (was %v), cri_guard_stats_error %v: the failed samples are not counted", n, errorsBefore, gauge)
		}
	}
	if h.logCount("cannot read node memory stats") == 0 {
		t.Errorf("nothing logged of the unreadable meminfo (no \"cannot read node memory stats\")")
	}

	stats.setAvailable(t, 12<<30) // a regular file again, by rename
	if note, ok := waitUntil(5*time.Second, func() (bool, string) {
		st, err := h.status()
		if err != nil {
			return false, err.Error()
		}
		return st.StatsError == "", "stats error " + st.StatsError
	}); !ok {
		t.Errorf("a regular meminfo put back is not picked up within 5s: %s", note)
	}

	took, err = h.terminate(hostileBound)
	t.Logf("SIGTERM to exit: %v", took.Round(time.Millisecond))
	if err != nil {
		t.Errorf("%v", err)
	}
}

// TestHostileReloadKeepsHistory: a SIGHUP with the config
// file unchanged must not restart the thresholds' observation state. Before
// the fix a reload dropped MemoryPressure within its transition period
// (a BestEffort pod was admitted) and restarted a soft threshold's grace
// period (a SIGHUP every second held the eviction off for good).
func TestHostileReloadKeepsHistory(t *testing.T) {
	env := needRuntime(t)

	t.Run("transition", func(t *testing.T) {
		removePodsAtCleanup(t, env)
		stats := newFakeStats(t)
		h := startHostileGuard(t, env, stats, `
evictionHard: {memory.available: 1Gi}
evictionPressureTransitionPeriod: 30s
`)
		stats.setAvailable(t, 500<<20)
		if note, ok := waitUntil(hostileBound, func() (bool, string) {
			st, err := h.status()
			return err == nil && slices.Contains(st.Conditions, "MemoryPressure"), fmt.Sprintf("conditions %v %v", st.Conditions, err)
		}); !ok {
			t.Fatalf("no MemoryPressure with memory.available 500Mi under a 1Gi hard threshold: %s", note)
		}
		stats.setAvailable(t, 12<<30)
		// a pass has seen the pressure over: the threshold is no longer
		// crossed, the condition holds for its transition period
		if note, ok := waitUntil(hostileBound, func() (bool, string) {
			st, err := h.status()
			if err != nil {
				return false, err.Error()
			}
			s, _ := signalOf(st, "memory.available")
			return s.Value > 1<<30 && len(st.Met) == 0, fmt.Sprintf("memory.available %v, met %v", s.Value, st.Met)
		}); !ok {
			t.Fatalf("pressure not seen over: %s", note)
		}
		if st := h.mustStatus(t); !slices.Contains(st.Conditions, "MemoryPressure") {
			t.Fatalf("MemoryPressure dropped before any reload, within its 30s transition period: %v", st.Conditions)
		}

		reloads := h.logCount("eviction thresholds reloaded")
		if err := h.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		if _, ok := waitUntil(hostileBound, func() (bool, string) {
			return h.logCount("eviction thresholds reloaded") > reloads, ""
		}); !ok {
			t.Fatalf("SIGHUP not reloaded within %s\n%s", hostileBound, h.LogTail())
		}
		// two samples after the reload (a sleep might not hold two passes
		// on a loaded machine)
		reloaded := time.Now()
		if note, ok := waitUntil(hostileBound, func() (bool, string) {
			st, err := h.status()
			return err == nil && st.SampledAt.After(reloaded.Add(300*time.Millisecond)), fmt.Sprintf("sampled at %s, %v", st.SampledAt, err)
		}); !ok {
			t.Fatalf("no sample within %s of the reload: %s", hostileBound, note)
		}
		st := h.mustStatus(t)
		if !slices.Contains(st.Conditions, "MemoryPressure") {
			t.Errorf("MemoryPressure dropped by a SIGHUP with the file unchanged, within its 30s transition period: conditions %v", st.Conditions)
		}
		uid := harness.NewUID(t)
		id, took, err := h.runPod(t, hostilePod("reload", uid))
		switch status.Code(err) {
		case codes.ResourceExhausted:
			t.Logf("BestEffort pod refused after the reload in %v: %v", took.Round(time.Millisecond), status.Convert(err).Message())
		case codes.OK:
			t.Errorf("BestEffort pod admitted (sandbox %s) after a SIGHUP with the file unchanged, within MemoryPressure's 30s transition period: the reload forgot the pressure history", id)
		default:
			t.Errorf("BestEffort RunPodSandbox after the reload: %v, want ResourceExhausted", err)
		}
	})

	t.Run("softGrace", func(t *testing.T) {
		removePodsAtCleanup(t, env)
		stats := newFakeStats(t)
		h := startHostileGuard(t, env, stats, `
evictionSoft: {memory.available: 1Gi}
evictionSoftGracePeriod: {memory.available: 3s}
evictionPressureTransitionPeriod: 5s
`)
		uid := harness.NewUID(t)
		id, _, err := h.runPod(t, hostilePod("grace", uid))
		if err != nil {
			t.Fatalf("BestEffort pod without pressure: %v", err)
		}

		reloads := h.logCount("eviction thresholds reloaded")
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					_ = h.Cmd.Process.Signal(syscall.SIGHUP)
				}
			}
		})
		// no SIGHUP once the test is done: cri-guard's default action on
		// one during its shutdown is to die
		defer wg.Wait()
		defer close(stop)
		if _, ok := waitUntil(hostileBound, func() (bool, string) {
			return h.logCount("eviction thresholds reloaded") > reloads, ""
		}); !ok {
			t.Fatalf("SIGHUP not reloaded within %s\n%s", hostileBound, h.LogTail())
		}

		stats.setAvailable(t, 500<<20)
		start := time.Now()
		const bound = 15 * time.Second // five grace periods
		note, ok := waitUntil(bound, func() (bool, string) {
			s := h.sandboxState(id)
			return s == "SANDBOX_NOTREADY", s
		})
		n := h.logCount("eviction thresholds reloaded") - reloads
		if !ok {
			t.Fatalf("BestEffort pod not evicted within %s of memory.available 500Mi under a soft 1Gi threshold with a 3s grace period, with a SIGHUP every second (%d reloads, file unchanged): each reload restarts the grace period (sandbox still %s)", bound, n, note)
		}
		t.Logf("evicted %v after the pressure began, through %d reloads", time.Since(start).Round(100*time.Millisecond), n)
		if n < 3 {
			t.Errorf("only %d reloads while the grace period ran: the test did not reload every second", n)
		}
	})
}

// TestHostileBrokenStatsFiles: stats files that go
// missing or hold garbage. Before the fix a missing PSI file disabled the
// PSI threshold in silence, garbage in it failed the whole sample (so
// memory.available could not evict either), and with meminfo gone status
// and metrics showed the last values and condition as current, the
// last-sample time advancing on failed samples.
func TestHostileBrokenStatsFiles(t *testing.T) {
	env := needRuntime(t)
	removePodsAtCleanup(t, env)
	stats := newFakeStats(t)
	const psi = "memory.pressure.some.avg10"
	h := startHostileGuard(t, env, stats, `
evictionHard: {memory.available: 1Gi, `+psi+`: "90%"}
evictionPressureTransitionPeriod: 30s
`)
	uid := harness.NewUID(t)
	id, _, err := h.runPod(t, hostilePod("broken", uid))
	if err != nil {
		t.Fatalf("BestEffort pod without pressure: %v", err)
	}
	good := func() (bool, string) {
		st, err := h.status()
		if err != nil {
			return false, err.Error()
		}
		_, ok := signalOf(st, "memory.available")
		return st.StatsError == "" && ok, fmt.Sprintf("stats error %q, signals %+v", st.StatsError, st.Signals)
	}
	if note, ok := waitUntil(hostileBound, good); !ok {
		t.Fatalf("no good sample at start: %s", note)
	}

	// a missing PSI file: the PSI threshold cannot act, and that shows
	pressureFile := filepath.Join(stats.proc, "pressure", "memory")
	if err := os.Remove(pressureFile); err != nil {
		t.Fatal(err)
	}
	note, ok := waitUntil(5*time.Second, func() (bool, string) {
		st, err := h.status()
		if err != nil {
			return false, err.Error()
		}
		s, _ := signalOf(st, psi)
		named := slices.ContainsFunc(st.SignalErrors, func(e string) bool { return strings.Contains(e, psi) })
		return s.Observed == "" && named, fmt.Sprintf("%s observed %q, signal errors %q", psi, s.Observed, st.SignalErrors)
	})
	if !ok {
		t.Errorf("pressure/memory removed, status does not say that the %s threshold cannot act: %s", psi, note)
	}
	if h.logCount("thresholds on signals missing from the sample cannot act") == 0 {
		t.Errorf("pressure/memory removed, nothing logged of the %s threshold that cannot act", psi)
	}

	// garbage in the PSI file: PSI is lost, memory.available still evicts
	harness.WriteAtomic(t, pressureFile, "some avg10=banana avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
	note, ok = waitUntil(5*time.Second, func() (bool, string) {
		st, err := h.status()
		if err != nil {
			return false, err.Error()
		}
		psiErr := slices.ContainsFunc(st.SignalErrors, func(e string) bool { return strings.Contains(e, "psi") })
		return psiErr, fmt.Sprintf("stats error %q, signal errors %q", st.StatsError, st.SignalErrors)
	})
	if !ok {
		t.Errorf("garbage in pressure/memory not shown as a PSI signal error: %s", note)
	}
	stats.setAvailable(t, 500<<20)
	start := time.Now()
	note, ok = waitUntil(hostileBound, func() (bool, string) {
		s := h.sandboxState(id)
		return s == "SANDBOX_NOTREADY", s
	})
	if ok {
		t.Logf("with garbage in pressure/memory, evicted %v after memory.available fell under its threshold", time.Since(start).Round(100*time.Millisecond))
	} else {
		st, _ := h.status()
		t.Errorf("BestEffort pod not evicted within %s of memory.available 500Mi under its 1Gi hard threshold with garbage in pressure/memory: the broken PSI file disables memory.available (sandbox still %s, stats error %q)", hostileBound, note, st.StatsError)
	}

	// meminfo gone, under pressure: no figure or condition shown as current
	stats.setPSI(t, 0, 0)
	if note, ok := waitUntil(hostileBound, good); !ok {
		t.Fatalf("no good sample after the PSI file is back: %s", note)
	}
	if err := os.Remove(filepath.Join(stats.proc, "meminfo")); err != nil {
		t.Fatal(err)
	}
	var st admin.Status
	note, ok = waitUntil(5*time.Second, func() (bool, string) {
		st, err = h.status()
		if err != nil {
			return false, err.Error()
		}
		return st.StatsError != "", "no stats error"
	})
	if !ok {
		t.Fatalf("meminfo removed, status shows no stats error within 5s: %s", note)
	}
	page, err := h.scrape()
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	stamp, _ := metric(page, "cri_guard_last_sample_timestamp_seconds", "")
	failed, _ := metric(page, "cri_guard_stats_errors_total", "")
	// four failed samples, counted (a sleep might not hold four passes on a
	// loaded machine, and the checks below are of what did not change)
	if note, ok := waitUntil(hostileBound, func() (bool, string) {
		pg, err := h.scrape()
		n, _ := metric(pg, "cri_guard_stats_errors_total", "")
		return err == nil && n >= failed+4, fmt.Sprintf("stats errors %v (was %v), %v", n, failed, err)
	}); !ok {
		t.Errorf("meminfo removed, failed samples not counted: %s", note)
	}
	st2 := h.mustStatus(t)
	page2, err := h.scrape()
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	t.Logf("meminfo removed: stats error %q, sampled at %s, conditions %v", st2.StatsError, st2.SampledAt.Format(time.RFC3339Nano), st2.Conditions)
	if !st2.SampledAt.Equal(st.SampledAt) {
		t.Errorf("meminfo removed, status sampledAt advanced from %s to %s on failed samples", st.SampledAt.Format(time.RFC3339Nano), st2.SampledAt.Format(time.RFC3339Nano))
	}
	if stamp2, _ := metric(page2, "cri_guard_last_sample_timestamp_seconds", ""); stamp2 != stamp {
		t.Errorf("meminfo removed, cri_guard_last_sample_timestamp_seconds advanced from %.3f to %.3f on failed samples", stamp, stamp2)
	}
	if gauge, _ := metric(page2, "cri_guard_stats_error", ""); gauge != 1 {
		t.Errorf("meminfo removed, cri_guard_stats_error %v, want 1", gauge)
	}
	if v, ok := metric(page2, "cri_guard_signal_value", `signal="memory.available"`); ok {
		t.Errorf("meminfo removed, metrics still export memory.available %v as current", v)
	}
	// onStatsError admit: admission acts on no condition, and so must
	// status and metrics
	if len(st2.Conditions) != 0 {
		t.Errorf("meminfo removed (onStatsError admit), status shows conditions %v that admission does not act on", st2.Conditions)
	}
	if v, _ := metric(page2, "cri_guard_node_condition", `condition="MemoryPressure"`); v != 0 {
		t.Errorf("meminfo removed (onStatsError admit), cri_guard_node_condition{MemoryPressure} %v, want 0", v)
	}
}
