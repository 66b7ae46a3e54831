//go:build integration

package host

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/integration/harness"
	"github.com/cri-guard/cri-guard/internal/checkpoint"
	"github.com/cri-guard/cri-guard/internal/pod"
)

// TestRestoreUnderPressure: a BestEffort pod and a critical (static)
// BestEffort pod are created through cri-guard without pressure; cri-guard
// is stopped, memory pressure set, and cri-guard started again on the same
// state dir. The checkpoints are replayed through admission: with
// restoredPods: enforce the BestEffort sandbox is evicted through the one
// eviction path (counted, its record stopped with EvictedAt) and the
// critical one stays ready; after another restart under pressure its
// recreation (attempt 1, Burstable, which the condition alone would admit)
// is refused as Evicted. With restoredPods: warn both stay ready.
//
// housekeepingInterval is an hour, and no fast path runs, so that only the
// restore's refusal acts: under pressure the eviction loop would otherwise
// stop the BestEffort pod too, and the test could not tell which of the two
// did it.
//
// Restore adopts every ready sandbox containerd runs, so with enforce it
// would also stop BestEffort sandboxes of tests running next to this one on
// the same containerd: the enforce case skips, saying so, when there are any.
func TestRestoreUnderPressure(t *testing.T) {
	env := needRuntime(t)
	removePodsAtCleanup(t, env)
	tests := []struct {
		name          string
		restoredPods  string
		wantBestReady bool
	}{
		{name: "enforce", restoredPods: "enforce", wantBestReady: false},
		{name: "warn", restoredPods: "warn", wantBestReady: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := "restore" + harness.NewUID(t)[:8]
			removeRunAtCleanup(t, env, run)
			stats := newFakeStats(t)
			cfg := writeConfig(t, `
housekeepingInterval: 1h
evictionHard: {memory.available: 1Gi}
psiTrigger: ""
kernelMemcgNotification: false
fastPoll: {interval: 0s}
metricsAddress: ""
adminSocket: ""
restoredPods: `+tt.restoredPods+"\n")
			gp := newGuardProc(t, env, append(cfg, stats.args()...)...)
			gp.start()

			conn := harness.Dial(t, gp.socket)
			t.Cleanup(func() { conn.Close() })
			rt := runtimeapi.NewRuntimeServiceClient(conn)
			best := runBestEffort(t, rt, run, "besteffort", nil)
			critical := runBestEffort(t, rt, run, "critical", map[string]string{"kubernetes.io/config.source": "file"})

			gp.signal(syscall.SIGTERM)
			if n := foreignReadySandboxes(t, env, run); n > 0 && tt.restoredPods == "enforce" {
				t.Skipf("containerd runs %d ready sandboxes of other tests: restore under pressure with restoredPods enforce would adopt and stop them too; run this test alone", n)
			}
			stats.setAvailable(t, 500<<20)
			gp.start() // returns once restore is done: cri-guard serves only then

			sbs := containerdSandboxes(t, env, run)
			if !tt.wantBestReady {
				// evicted by the loop once it runs, not by the restore itself
				deadline := time.Now().Add(30 * time.Second)
				for sbs[best] != nil && sbs[best].State == runtimeapi.PodSandboxState_SANDBOX_READY && time.Now().Before(deadline) {
					time.Sleep(100 * time.Millisecond)
					sbs = containerdSandboxes(t, env, run)
				}
			}
			state := func(id string) runtimeapi.PodSandboxState {
				sb, ok := sbs[id]
				if !ok {
					t.Fatalf("containerd no longer has sandbox %s", id)
				}
				return sb.State
			}
			wantBest := runtimeapi.PodSandboxState_SANDBOX_NOTREADY
			if tt.wantBestReady {
				wantBest = runtimeapi.PodSandboxState_SANDBOX_READY
			}
			if got := state(best); got != wantBest {
				t.Errorf("restoredPods %s: BestEffort sandbox is %s after the restart under pressure, want %s", tt.restoredPods, got, wantBest)
			}
			if got := state(critical); got != runtimeapi.PodSandboxState_SANDBOX_READY {
				t.Errorf("restoredPods %s: critical sandbox is %s after the restart under pressure, want SANDBOX_READY", tt.restoredPods, got)
			}
			// crictl inspectp on containerd says the same
			if got := env.Crictl(t, env.Containerd, "inspectp", "-o", "go-template", "--template", "{{.status.state}}", best); got != wantBest.String() {
				t.Errorf("crictl inspectp %s: state %q, want %s", best, got, wantBest)
			}
			wantRec := pod.StateStopped
			if tt.wantBestReady {
				wantRec = pod.StateReady
			}
			var rec *checkpoint.Record
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				for _, r := range gp.records(run) {
					if r.SandboxID == best {
						rec = &r
					}
				}
				if (rec != nil && rec.State == wantRec) || time.Now().After(deadline) {
					break
				}
			}
			switch {
			case rec == nil:
				t.Fatalf("no record of the BestEffort sandbox %s after the restart", best)
			case rec.State != wantRec:
				t.Errorf("record of the BestEffort pod: state %s, want %s", rec.State, wantRec)
			case rec.Pod.EvictedAt.IsZero() != tt.wantBestReady:
				t.Errorf("record of the BestEffort pod: evicted at %v, want set only when evicted", rec.Pod.EvictedAt)
			}
			t.Logf("restoredPods %s: BestEffort %s, critical %s; restore: %v", tt.restoredPods, state(best), state(critical), gp.restoreTotals())
			if tt.wantBestReady {
				return
			}

			// another restart, pressure still on: the evicted pod's
			// recreation is refused by the re-admission guard restored from
			// its record
			gp.signal(syscall.SIGTERM)
			gp.start()
			md := sbs[best].Metadata
			pc := qosPodConfig(md.Name, md.Uid, "burstable")
			pc.Metadata.Attempt = 1
			pc.Labels[runLabel] = run
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc})
			if st, _ := status.FromError(err); st.Code() != codes.ResourceExhausted || !strings.HasPrefix(st.Message(), "Evicted: ") {
				t.Fatalf("recreation of the evicted pod after another restart: %v, want ResourceExhausted Evicted", err)
			}
		})
	}
}

// foreignReadySandboxes counts the ready sandboxes on containerd that are
// not this run's.
func foreignReadySandboxes(t *testing.T, env harness.Runtime, run string) int {
	t.Helper()
	conn := harness.Dial(t, env.Containerd)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := runtimeapi.NewRuntimeServiceClient(conn).ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}},
	})
	if err != nil {
		t.Fatalf("list sandboxes on containerd: %v", err)
	}
	n := 0
	for _, sb := range resp.Items {
		if sb.Labels[runLabel] != run {
			n++
		}
	}
	return n
}

// runBestEffort runs a BestEffort pod of this run (runLabel) with the
// annotations through rt, before any pressure, and returns its sandbox id.
func runBestEffort(t *testing.T, rt runtimeapi.RuntimeServiceClient, run, name string, annotations map[string]string) string {
	t.Helper()
	uid := harness.NewUID(t)
	pc := qosPodConfig(name+"-"+uid[:6], uid, "besteffort")
	pc.Labels[runLabel] = run
	pc.Annotations = annotations
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc})
	if err != nil {
		t.Fatalf("RunPodSandbox %s without pressure: %v", name, err)
	}
	return resp.PodSandboxId
}
