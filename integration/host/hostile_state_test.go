//go:build integration

package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/integration/harness"
	"github.com/cri-guard/cri-guard/internal/admin"
	"github.com/cri-guard/cri-guard/internal/checkpoint"
	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/testutil"
)

// The hostile-host tests that need the
// real cri-guard in front of the real containerd: a full state disk, and
// sandboxes whose configs make containerd's sandbox list too large.

// putErrors is the series that counts failed checkpoint writes.
const putErrors = `cri_guard_checkpoint_operations_total{op="put",result="error"}`

// TestHostileFullDiskKeepsGuard: an evicted pod's
// EvictedAt cannot be written because the state disk is full. Once space
// returns the record must be written after all, so that a cri-guard
// restarted under the same pressure still refuses the pod's recreation
// (same UID, attempt 1). The pod is Burstable, which admission alone admits
// under memory pressure: only the re-admission guard of an evicted pod
// refuses it (a fresh Burstable pod admitted at the end shows it).
func TestHostileFullDiskKeepsGuard(t *testing.T) {
	env := needRuntime(t)
	removePodsAtCleanup(t, env)
	run := "fulldisk" + harness.NewUID(t)[:8]
	removeRunAtCleanup(t, env, run)
	if n := foreignReadySandboxes(t, env, run); n > 0 {
		// cri-guard adopts them at start-up and would evict them under the pressure
		t.Skipf("containerd runs %d ready sandboxes of other tests: under pressure cri-guard would adopt and evict them; run this test alone", n)
	}
	stats := newFakeStats(t)
	metricsAddr := testutil.FreeAddr(t)
	cfg := writeConfig(t, `
housekeepingInterval: 1s
evictionHard: {memory.available: 1Gi}
evictionPressureTransitionPeriod: 1m
psiTrigger: ""
metricsAddress: `+metricsAddr+`
adminSocket: ""
`)
	gp := newGuardProc(t, env, append(cfg, stats.args()...)...)
	stateOnTmpfs(t, gp)
	gp.start()
	conn := harness.Dial(t, gp.socket)
	t.Cleanup(func() { conn.Close() })
	rt := runtimeapi.NewRuntimeServiceClient(conn)

	uid := harness.NewUID(t)
	pc := qosPodConfig("fulldisk-"+uid[:6], uid, "burstable")
	pc.Labels[runLabel] = run
	id, err := runPod(rt, pc)
	if err != nil {
		t.Fatalf("RunPodSandbox of the Burstable pod without pressure: %v", err)
	}
	key := pod.Key(uid, 0)
	waitRecord(t, gp, run, key, 10*time.Second, "the admitted pod's ready record", func(r checkpoint.Record) bool {
		return r.State == pod.StateReady && r.SandboxID == id
	})

	free := fillDisk(t, gp.stateDir)
	stats.setAvailable(t, 500<<20)
	deadline := time.Now().Add(30 * time.Second)
	for sandboxState(t, env, id) != runtimeapi.PodSandboxState_SANDBOX_NOTREADY ||
		metricValue(t, metricsAddr, "cri_guard_evictions_total") < 1 || metricValue(t, metricsAddr, putErrors) < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("pod not evicted (state %s, evictions %v, failed writes %v) within 30s of the pressure\n%s",
				sandboxState(t, env, id), metricValue(t, metricsAddr, "cri_guard_evictions_total"), metricValue(t, metricsAddr, putErrors), gp.cur.LogTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// the disk really was full: the record on it is the one from before
	if r, ok := gp.records(run)[key]; !ok || r.State != pod.StateReady || !r.Pod.EvictedAt.IsZero() {
		t.Fatalf("setup: the record on the full disk is not the one from before the eviction (present %v, state %s, evictedAt %v)", ok, r.State, r.Pod.EvictedAt)
	}
	t.Logf("evicted with the state disk full: %v failed checkpoint writes", metricValue(t, metricsAddr, putErrors))

	free()
	written := waitRecordErr(gp, run, key, 15*time.Second, func(r checkpoint.Record) bool {
		return r.State == pod.StateStopped && !r.Pod.EvictedAt.IsZero()
	})
	if written != nil {
		// go on: the restart shows what the lost write costs
		t.Errorf("after the space returned, the evicted pod's record was not written with EvictedAt within 15s (the failed write was dropped): %v", written)
	}

	gp.signal(syscall.SIGTERM)
	gp.start() // same state dir, same pressure
	again := qosPodConfig(pc.Metadata.Name, uid, "burstable")
	again.Labels[runLabel] = run
	again.Metadata.Attempt = 1
	if id2, err := runPod(rt, again); err == nil {
		t.Fatalf("the recreation of the pod evicted while the state disk was full (uid %s, attempt 1) was admitted after a restart under the same pressure (sandbox %s): the re-admission guard was lost with the failed EvictedAt write", uid, id2)
	} else if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "Evicted") {
		t.Fatalf("recreation of the evicted pod: %v, want ResourceExhausted, Evicted", err)
	} else {
		t.Logf("recreation refused after the restart: %v", err)
	}
	// admission alone admits a Burstable pod under this pressure: the
	// refusal came from the re-admission guard
	other := harness.NewUID(t)
	control := qosPodConfig("fulldisk-"+other[:6], other, "burstable")
	control.Labels[runLabel] = run
	if _, err := runPod(rt, control); err != nil {
		t.Fatalf("a fresh Burstable pod under the same pressure: %v, want admitted", err)
	}
}

// TestHostileFullDiskAdmits: with the state disk full
// from the start, RunPodSandbox of a static (critical) pod and of an
// ordinary one through cri-guard both create a ready sandbox; the failed
// writes are counted and logged; once space returns both records are
// written.
func TestHostileFullDiskAdmits(t *testing.T) {
	env := needRuntime(t)
	removePodsAtCleanup(t, env)
	run := "fulladmit" + harness.NewUID(t)[:8]
	removeRunAtCleanup(t, env, run)
	metricsAddr := testutil.FreeAddr(t)
	cfg := writeConfig(t, `
housekeepingInterval: 1s
psiTrigger: ""
metricsAddress: `+metricsAddr+`
adminSocket: ""
`)
	gp := newGuardProc(t, env, append(cfg, newFakeStats(t).args()...)...)
	stateOnTmpfs(t, gp)
	free := fillDisk(t, gp.stateDir)
	gp.start()
	conn := harness.Dial(t, gp.socket)
	t.Cleanup(func() { conn.Close() })
	rt := runtimeapi.NewRuntimeServiceClient(conn)

	pods := map[string]*runtimeapi.PodSandboxConfig{}
	for _, kind := range []string{"static", "ordinary"} {
		uid := harness.NewUID(t)
		pc := qosPodConfig(kind+"-"+uid[:6], uid, "besteffort")
		pc.Labels[runLabel] = run
		if kind == "static" {
			pc.Annotations = map[string]string{pod.AnnotationConfigSource: "file"}
		}
		pods[kind] = pc
	}
	ids := map[string]string{}
	for _, kind := range []string{"static", "ordinary"} {
		id, err := runPod(rt, pods[kind])
		if err != nil {
			t.Errorf("RunPodSandbox of the %s pod with the state disk full: %v: cri-guard's bookkeeping refused a pod", kind, err)
			continue
		}
		ids[kind] = id
		if st := sandboxState(t, env, id); st != runtimeapi.PodSandboxState_SANDBOX_READY {
			t.Errorf("%s pod's sandbox %s is %s in containerd, want SANDBOX_READY", kind, id, st)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	if n := metricValue(t, metricsAddr, putErrors); n < 2 {
		t.Errorf("%s = %v after two pods with the state disk full, want at least 2", putErrors, n)
	}
	logb, err := os.ReadFile(gp.cur.Log)
	if err != nil {
		t.Fatal(err)
	}
	logged := 0
	for _, l := range strings.Split(string(logb), "\n") {
		if strings.Contains(l, "cannot write checkpoint") && strings.Contains(l, "no space left on device") {
			logged++
		}
	}
	if logged < 2 {
		t.Errorf("%d log lines say a checkpoint write failed for lack of space, want one per pod", logged)
	}
	if recs := gp.records(run); len(recs) != 0 {
		t.Fatalf("setup: %d records written to a full disk", len(recs))
	}

	free()
	for kind, pc := range pods {
		waitRecord(t, gp, run, pod.Key(pc.Metadata.Uid, 0), 15*time.Second, "the "+kind+" pod's record after the space returned", func(r checkpoint.Record) bool {
			return r.State == pod.StateReady && r.SandboxID == ids[kind]
		})
	}
	if r := gp.records(run)[pod.Key(pods["static"].Metadata.Uid, 0)]; !r.Pod.Critical || !r.Pod.Static {
		t.Errorf("the static pod's record: critical %v, static %v, want both", r.Pod.Critical, r.Pod.Static)
	}
}

// stateOnTmpfs mounts a 2 MiB tmpfs at gp's state dir, so that a test can
// fill it. At cleanup cri-guard is stopped first (it holds the directory's
// lock), then the tmpfs is unmounted.
func stateOnTmpfs(t *testing.T, gp *guardProc) {
	t.Helper()
	if err := os.MkdirAll(gp.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", gp.stateDir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs for a small state disk (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() {
		if gp.cur != nil {
			gp.cur.Stop(t)
			gp.cur = nil
		}
		if out, err := exec.Command("umount", gp.stateDir).CombinedOutput(); err != nil {
			t.Errorf("cleanup: umount %s: %v: %s", gp.stateDir, err, out)
		}
	})
}

// fillDisk fills the filesystem of dir with one hidden file (no record name)
// until a write fails for lack of space, and checks that a new small file
// cannot be written either. free removes the file.
func fillDisk(t *testing.T, dir string) (free func()) {
	t.Helper()
	path := filepath.Join(dir, ".fill")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	for {
		if _, err = f.Write(buf); err != nil {
			break
		}
	}
	f.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("fill %s: %v, want ENOSPC", dir, err)
	}
	probe := filepath.Join(dir, ".probe")
	err = os.WriteFile(probe, []byte("x"), 0o600)
	os.Remove(probe)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a small file on the filled %s: %v, want ENOSPC", dir, err)
	}
	removed := false
	free = func() {
		if !removed {
			removed = true
			if err := os.Remove(path); err != nil {
				t.Errorf("free %s: %v", dir, err)
			}
		}
	}
	t.Cleanup(free)
	return free
}

// runPod runs a sandbox through rt, bounded by a minute.
func runPod(rt runtimeapi.RuntimeServiceClient, pc *runtimeapi.PodSandboxConfig) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc})
	if err != nil {
		return "", err
	}
	return resp.PodSandboxId, nil
}

// sandboxState is the sandbox's state as containerd tells it.
func sandboxState(t *testing.T, env harness.Runtime, id string) runtimeapi.PodSandboxState {
	t.Helper()
	conn := harness.Dial(t, env.Containerd)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := runtimeapi.NewRuntimeServiceClient(conn).PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		t.Fatalf("PodSandboxStatus %s on containerd: %v", id, err)
	}
	return resp.GetStatus().GetState()
}

// waitRecord waits until the run's record key satisfies ok, failing the
// test after wait.
func waitRecord(t *testing.T, gp *guardProc, run, key string, wait time.Duration, what string, ok func(checkpoint.Record) bool) {
	t.Helper()
	if err := waitRecordErr(gp, run, key, wait, ok); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, gp.cur.LogTail())
	}
}

func waitRecordErr(gp *guardProc, run, key string, wait time.Duration, ok func(checkpoint.Record) bool) error {
	deadline := time.Now().Add(wait)
	for {
		r, found := gp.records(run)[key]
		if found && ok(r) {
			return nil
		}
		if time.Now().After(deadline) {
			if !found {
				return fmt.Errorf("no record %s after %v", key, wait)
			}
			return fmt.Errorf("record %s after %v: state %s, sandbox %q, evictedAt %v", key, wait, r.State, r.SandboxID, r.Pod.EvictedAt)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// metricValue is the value of one series (`name{labels}`, labels in the
// exposition's order) on cri-guard's metrics page, or, for a bare name, the
// sum of its series; 0 when absent.
func metricValue(t *testing.T, addr, series string) float64 {
	t.Helper()
	re := regexp.QuoteMeta(series)
	if !strings.Contains(series, "{") {
		re += `(?:\{[^}]*\})?`
	}
	sum := 0.0
	for _, m := range regexp.MustCompile(`(?m)^`+re+` ([0-9.e+-]+)$`).FindAllStringSubmatch(scrape(t, "http://"+addr+"/metrics"), -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		sum += v
	}
	return sum
}

// The huge sandboxes: hugeSandboxes of them, each with hugeAnnotations
// annotations of hugeValue bytes: 4 MiB a request (containerd takes 16),
// 24 MiB of configs in containerd's sandbox list, which containerd itself
// then refuses to send (its 16 MiB send limit).
const (
	hugeSandboxes   = 6
	hugeAnnotations = 4
	hugeValue       = 1 << 20
	// hugeServeBound separates a cri-guard that serves from one that never
	// listens (the old one retries its restore forever).
	hugeServeBound = 20 * time.Second
)

// TestHostileHugeSandboxConfigs: sandboxes whose configs
// (annotations, legal for containerd) make the sandbox list larger than the
// 16 MiB a CRI message may carry. cri-guard started in front of them must
// serve within a bound (Version), show the restore it could not finish
// (status, metric), admit a new pod, and let the kubelet stop and remove
// those sandboxes through it; once they are gone the restore finishes in
// the background. The huge sandboxes are made and removed directly in
// containerd, by id: listing them fails.
func TestHostileHugeSandboxConfigs(t *testing.T) {
	env := needRuntime(t)
	removePodsAtCleanup(t, env)
	run := "huge" + harness.NewUID(t)[:8]
	big := dialBig(t, env.Containerd)
	var huge []string
	t.Cleanup(func() { // before removePodsAtCleanup, whose list would fail
		for _, id := range huge {
			removeSandbox(t, big, id)
		}
	})
	value := strings.Repeat("x", hugeValue)
	start := time.Now()
	for i := range hugeSandboxes {
		uid := harness.NewUID(t)
		pc := qosPodConfig(fmt.Sprintf("huge%d-%s", i, uid[:6]), uid, "besteffort")
		pc.Hostname = "" // host network: no CNI set-up for these
		pc.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
		}
		pc.Labels[runLabel] = run
		pc.Annotations = map[string]string{}
		for j := range hugeAnnotations {
			pc.Annotations[fmt.Sprintf("cri-guard.io/huge-%d", j)] = value
		}
		id, err := runPod(big, pc)
		if err != nil {
			t.Fatalf("RunPodSandbox of a sandbox with %d MiB of annotations on containerd: %v", hugeAnnotations*hugeValue>>20, err)
		}
		huge = append(huge, id)
	}
	t.Logf("%d sandboxes with %d MiB of annotations each made on containerd in %.1fs", len(huge), hugeAnnotations*hugeValue>>20, time.Since(start).Seconds())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	_, err := big.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	cancel()
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("setup: containerd's sandbox list with the huge sandboxes: %v, want ResourceExhausted (larger than a CRI message)", err)
	}

	metricsAddr := testutil.FreeAddr(t)
	adminSocket := filepath.Join(harness.ShortTempDir(t), "admin.sock")
	cfg := writeConfig(t, `
housekeepingInterval: 1s
psiTrigger: ""
metricsAddress: `+metricsAddr+`
adminSocket: `+adminSocket+`
`)
	gp := newGuardProc(t, env, append(cfg, newFakeStats(t).args()...)...)
	start = time.Now()
	if err := gp.startWithin(hugeServeBound); err != nil {
		t.Fatalf("cri-guard in front of %d sandboxes with %d MiB of configs: %v", len(huge), len(huge)*hugeAnnotations*hugeValue>>20, err)
	}
	t.Logf("cri-guard serving %.1fs after its start", time.Since(start).Seconds())
	st, err := admin.Fetch(context.Background(), adminSocket)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	if st.Degraded == "" {
		t.Errorf("status shows no degraded restore while containerd's sandbox list is too large")
	}
	if v := metricValue(t, metricsAddr, "cri_guard_restore_degraded"); v != 1 {
		t.Errorf("cri_guard_restore_degraded = %v while the restore cannot finish, want 1", v)
	}
	t.Logf("degraded: %s", st.Degraded)

	conn := harness.Dial(t, gp.socket)
	t.Cleanup(func() { conn.Close() })
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	uid := harness.NewUID(t)
	pc := qosPodConfig("beside-huge-"+uid[:6], uid, "besteffort")
	pc.Labels[runLabel] = run
	id, err := runPod(rt, pc)
	if err != nil {
		t.Fatalf("RunPodSandbox through cri-guard while its restore cannot finish: %v", err)
	}
	if s := sandboxState(t, env, id); s != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("the new pod's sandbox is %s, want SANDBOX_READY", s)
	}
	for _, hid := range huge {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: hid})
		if err == nil {
			_, err = rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: hid})
		}
		cancel()
		if err != nil {
			t.Fatalf("stop and remove a huge sandbox through cri-guard: %v", err)
		}
	}
	huge = nil

	// the list fits again: the restore retried in the background finishes
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err = admin.Fetch(context.Background(), adminSocket)
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		if st.Degraded == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still degraded 20s after the huge sandboxes were removed: %s\n%s", st.Degraded, gp.cur.LogTail())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if v := metricValue(t, metricsAddr, "cri_guard_restore_degraded"); v != 0 {
		t.Errorf("cri_guard_restore_degraded = %v after the restore finished, want 0", v)
	}
	found := false
	for _, p := range st.Pods {
		found = found || (p.UID == uid && p.State == string(pod.StateReady))
	}
	if !found {
		t.Errorf("the pod admitted while degraded is not a ready pod of cri-guard after the restore: %+v", st.Pods)
	}
}

// dialBig is a CRI client of socket that sends and receives messages up to
// 64 MiB (the huge sandboxes' requests, and the answer containerd refuses).
func dialBig(t *testing.T, socket string) runtimeapi.RuntimeServiceClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatalf("dial %s: %v", socket, err)
	}
	t.Cleanup(func() { conn.Close() })
	return runtimeapi.NewRuntimeServiceClient(conn)
}
