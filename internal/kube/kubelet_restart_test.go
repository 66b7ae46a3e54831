package kube

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/testutil"
)

// fakeKubelet plays the kubelet's status manager for one pod already
// Failed in the API, as far as reason and message go: its cache holds the
// reason and message it derived; each status sync (syncBatch, every 10 s)
// writes them over the API's where they differ (and says whether it did); a sync of the pod by its
// worker (podSync) takes the API's where its cache has none
// (generateAPIPodStatus); a restart empties the cache.
type fakeKubelet struct {
	f               *fakeAPI
	name            string
	reason, message string
}

func (k *fakeKubelet) syncBatch() (wrote bool) {
	p := k.f.pod(k.name)
	if p.Status.Reason == k.reason && p.Status.Message == k.message {
		return false
	}
	k.f.kubeletWrites(k.name, func(st *corev1.PodStatus) { st.Reason, st.Message = k.reason, k.message })
	return true
}

func (k *fakeKubelet) podSync(st corev1.PodStatus) {
	if k.reason == "" {
		k.reason = st.Reason
	}
	if k.message == "" {
		k.message = st.Message
	}
}

func (k *fakeKubelet) restart() { k.reason, k.message = "", "" }

// TestKubeletRestartRearmsBound: a kubelet whose status cache lacks
// cri-guard's reason and message (its container exited 0, the phase it
// derived forced back to the API's Failed without them) writes its own
// back at every status sync. cri-guard answers reassertMax of them, then
// leaves the kubelet's empty values. Without a kubelet restart that is
// where it stays. A restart (cmd sees the new kubelet process on the CRI
// socket before it syncs any pod) arms the bound again, 10 min after the
// report: the fields are written at once, the new kubelet's first sync
// takes them from the API and they stick; or its first sync regresses
// them, they are written again and its next sync takes them. A kubelet
// whose cache still never takes them gets reassertMax writes for its
// start and is then left alone again. A kubelet seen to exit first
// (KubeletStopped) has them written while none runs: the next one's first
// sync takes them even when it comes before the write at its start would
// have landed. One event in every case.
func TestKubeletRestartRearmsBound(t *testing.T) {
	tests := []struct {
		name    string
		restart bool
		stop    bool // the old kubelet's exit is seen before the new one starts
		// after the restart: the kubelet's first sync reads a pod from
		// before cri-guard's write; its cache never takes the API's
		staleFirstSync, neverTakes bool
		patches, left              int // status patches of the pod in all; "left" log lines
		holds                      bool
	}{
		{name: "no restart: the bound holds", patches: 1 + reassertMax, left: 1},
		{name: "restart: written at once, first sync takes it", restart: true, patches: 2 + reassertMax, left: 1, holds: true},
		{name: "restart: first sync regresses it, written again, next sync takes it", restart: true, staleFirstSync: true,
			patches: 3 + reassertMax, left: 1, holds: true},
		{name: "restart: never taken, bounded again", restart: true, neverTakes: true, patches: 1 + 2*reassertMax, left: 2},
		{name: "stop, then restart: written while none runs, the first sync takes it before the start's write", restart: true, stop: true,
			patches: 2 + reassertMax, left: 1, holds: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeAPI(t, apiPod("web", "u1"), apiPod("barrier", "u2"))
			now := time.Unix(5000, 0)
			var mu sync.Mutex
			tick := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
			var logs func() string
			c := f.start(Config{}, func(c *Client) {
				c.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
				logs = logTo(c)
			})
			want := &report{kind: kindEvict, reason: "Evicted", message: evictMsg}
			k := &fakeKubelet{f: f, name: "web"}
			written := func(n int, what string) {
				t.Helper()
				testutil.WaitFor(t, what, func() bool {
					return f.podPatches("web") == n && c.State().Pending == 0 && holds(f.pod("web"), want)
				})
			}
			c.Evicted(&pod.Pod{UID: "u1", Name: "web", Namespace: "default"}, evictMsg)
			written(1, "reported")
			for i := range reassertMax {
				tick(10 * time.Second)
				k.syncBatch()
				written(2+i, fmt.Sprintf("replacement %d written again", i+1))
			}
			tick(10 * time.Second)
			k.syncBatch()
			testutil.WaitFor(t, "left to the kubelet", func() bool { return strings.Contains(logs(), leftToKubelet) })
			if tt.stop {
				tick(10 * time.Minute) // past the first window
				c.KubeletStopped()
				written(2+reassertMax, "written again at the kubelet's exit")
				k.restart()
				k.podSync(f.pod("web").Status) // before KubeletStarted is told
				c.KubeletStarted()
				if n := f.podPatches("web"); n != 2+reassertMax {
					t.Fatalf("%d status patches after the start of a kubelet whose first sync read the report, want %d", n, 2+reassertMax)
				}
			}
			if tt.restart && !tt.stop {
				tick(10 * time.Minute) // past the first window
				k.restart()
				c.KubeletStarted()
				written(2+reassertMax, "written again at the kubelet's start")
				switch {
				case tt.staleFirstSync:
					k.podSync(corev1.PodStatus{})
					k.syncBatch()
					written(3+reassertMax, "the first sync's regression written again")
					k.podSync(f.pod("web").Status)
				case tt.neverTakes:
					for i := 1; i < reassertMax; i++ {
						tick(10 * time.Second)
						k.syncBatch()
						written(2+reassertMax+i, fmt.Sprintf("replacement %d after the start written again", i))
					}
					tick(10 * time.Second)
					k.syncBatch()
					testutil.WaitFor(t, "left to the kubelet again", func() bool { return strings.Count(logs(), leftToKubelet) == 2 })
				default:
					k.podSync(f.pod("web").Status)
				}
			}
			for range 20 {
				tick(10 * time.Second)
				if k.syncBatch() && tt.holds {
					t.Fatalf("the kubelet wrote over a report its cache has taken")
				}
			}
			// the watch's changes are handled in order: once the barrier
			// pod's replacement is written again, every change of web's was
			// seen
			c.Evicted(&pod.Pod{UID: "u2", Name: "barrier", Namespace: "default"}, evictMsg)
			testutil.WaitFor(t, "the barrier pod reported", func() bool { return f.podPatches("barrier") == 1 && c.State().Pending == 0 })
			f.kubeletWrites("barrier", func(st *corev1.PodStatus) { st.Message = "" })
			testutil.WaitFor(t, "the barrier pod written again", func() bool { return f.podPatches("barrier") == 2 && c.State().Pending == 0 })

			if n := f.podPatches("web"); n != tt.patches {
				t.Errorf("%d status patches of the pod, want %d", n, tt.patches)
			}
			if n := strings.Count(logs(), leftToKubelet); n != tt.left {
				t.Errorf("left to the kubelet logged %d times, want %d:\n%s", n, tt.left, logs())
			}
			st := f.pod("web").Status
			if got := holds(f.pod("web"), want); got != tt.holds {
				t.Errorf("status %+v: report holds %t, want %t", st, got, tt.holds)
			}
			if st.Phase != corev1.PodFailed || !disruptionTargetHolds(&st, want) {
				t.Errorf("status %+v: want Failed and DisruptionTarget kept", st)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			n := 0
			for _, e := range f.events {
				if e.InvolvedObject.Name == "web" {
					n += max(int(e.Count), 1)
				}
			}
			if n != 1 {
				t.Errorf("%d events of the pod, want 1", n)
			}
		})
	}
}

// TestKubeletStartedLeavesSettledReports: a kubelet's start writes nothing
// for a report that has nothing to keep (its pod terminal before it) nor
// for a pod whose report holds; it gives a report with part of its bound
// spent the whole bound again, counting nothing for a report that holds:
// each of reassertMax replacements after the start is answered.
func TestKubeletStartedLeavesSettledReports(t *testing.T) {
	done := apiPod("done", "u3")
	done.Status.Phase = corev1.PodSucceeded
	f := newFakeAPI(t, apiPod("web", "u1"), done)
	c := f.start(Config{})
	c.Evicted(&pod.Pod{UID: "u3", Name: "done", Namespace: "default"}, evictMsg)
	c.Evicted(&pod.Pod{UID: "u1", Name: "web", Namespace: "default"}, evictMsg)
	want := &report{kind: kindEvict, reason: "Evicted", message: evictMsg}
	testutil.WaitFor(t, "reported", func() bool { return f.podPatches("web") == 1 && c.State().Pending == 0 })
	replaced := func(n int, what string) {
		t.Helper()
		f.kubeletWrites("web", func(st *corev1.PodStatus) { st.Reason, st.Message = "", "" })
		testutil.WaitFor(t, what, func() bool { return f.podPatches("web") == n && c.State().Pending == 0 && holds(f.pod("web"), want) })
	}
	for i := range reassertMax - 1 {
		replaced(2+i, fmt.Sprintf("replacement %d before the start written again", i+1))
	}
	c.KubeletStarted()
	if n := f.podPatches("web"); n != reassertMax {
		t.Fatalf("%d status patches of a report that holds after the kubelet's start, want %d", n, reassertMax)
	}
	for i := range reassertMax {
		replaced(1+reassertMax+i, fmt.Sprintf("replacement %d after the start written again", i+1))
	}
	if n := f.podPatches("done"); n != 0 {
		t.Fatalf("%d status patches of a pod terminal before its report", n)
	}
}
