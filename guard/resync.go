package guard

import (
	"context"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/pod"
)

// resyncTimeout bounds one listing of the runtime's sandboxes (off the loop).
const resyncTimeout = 5 * time.Second

// A listing of the runtime's sandboxes is the fallback for missed runtime
// events: housekeeping starts one (resync), and so does the event stream
// when it breaks (relist). The runtime is asked off the loop, with a
// deadline; the answer is handed to the loop, which applies it in memory
// (applyListing).
//
// A listing is a picture of the runtime taken at some moment while the loop
// went on: a sandbox created after it is missing from it, one stopped after
// it is still ready in it. So every outcome the loop records of a sandbox
// (created, stopped, removed, an event, a listing's own change) touches its
// record with the next generation number, and a listing is applied only to
// the records no outcome touched since it started: a stale listing never
// overrides a newer outcome; what it skips the next listing sees.

// touch records that an outcome changed key's record (loop goroutine).
func (l *Loop) touch(key string) {
	l.gen++
	l.changed[key] = l.gen
}

// resync starts a listing of the runtime's sandboxes off the loop, unless
// the last one started here is still under way (it serves: a runtime that
// is slow to list is not asked more often) (loop goroutine). Its answer
// comes back through the loop's queue.
func (l *Loop) resync(ctx context.Context) {
	if l.listing {
		return
	}
	l.listing = true
	since := l.gen
	go func() {
		sbs, err := l.listSandboxes(ctx)
		l.post(func() {
			l.listing = false
			l.applyListing(since, sbs, err)
		})
	}()
}

// relist lists the runtime's sandboxes on the caller's goroutine (the
// event stream's, once it broke: what it missed is in no event) and
// applies the listing on the loop; the loop waits on neither the runtime
// nor the caller.
func (l *Loop) relist(ctx context.Context) {
	var since uint64
	if err := l.do(ctx, func() { since = l.gen }); err != nil {
		return
	}
	sbs, err := l.listSandboxes(ctx)
	_ = l.do(ctx, func() { l.applyListing(since, sbs, err) })
}

// listSandboxes is one ListPodSandbox, bounded by resyncTimeout (off the
// loop).
func (l *Loop) listSandboxes(ctx context.Context) ([]*runtimeapi.PodSandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, resyncTimeout)
	defer cancel()
	return l.rt.ListPodSandbox(ctx, nil)
}

// applyListing makes the known pods agree with a listing started at
// generation since (loop goroutine): a sandbox that is no longer ready is
// stopped, one that is gone is removed, one ready again is a candidate
// again; a record touched since the listing started keeps what the newer
// outcome said, and one still pending has no sandbox to compare.
func (l *Loop) applyListing(since uint64, sbs []*runtimeapi.PodSandbox, err error) {
	if err != nil {
		l.log.WithError(err).Debug("resync: cannot list sandboxes")
		return
	}
	states := make(map[string]runtimeapi.PodSandboxState, len(sbs))
	for _, sb := range sbs {
		states[sb.GetId()] = sb.GetState()
	}
	changed := false
	for key, p := range l.pods {
		if p.SandboxID == "" || l.changed[key] > since {
			continue // RunPodSandbox in flight, or an outcome newer than the listing
		}
		st, ok := states[p.SandboxID]
		switch {
		case !ok:
			l.sandboxGone(key, p)
		case st != runtimeapi.PodSandboxState_SANDBOX_READY && p.State == pod.StateReady:
			l.sandboxNotReady(key, p)
		case st == runtimeapi.PodSandboxState_SANDBOX_READY && p.State == pod.StateStopped:
			// a record older than its sandbox's state (written by a
			// release that marked a pod stopped before the stop): the
			// runtime's word wins, and the pod is a candidate again
			l.log.WithFields(podFields(p)).Info("sandbox is ready again")
			p.State = pod.StateReady
			l.touch(key)
			l.save(p)
		default:
			continue
		}
		changed = true
	}
	if changed {
		l.publish()
	}
}

// sandboxGone drops the record of a sandbox the runtime no longer has
// (loop goroutine; the caller publishes).
func (l *Loop) sandboxGone(key string, p *pod.Pod) {
	l.log.WithFields(podFields(p)).Info("sandbox is gone from the runtime")
	l.drop(key)
	delete(l.pods, key)
}

// sandboxNotReady marks a ready pod's sandbox stopped (loop goroutine; the
// caller publishes).
func (l *Loop) sandboxNotReady(key string, p *pod.Pod) {
	l.log.WithFields(podFields(p)).Info("sandbox is no longer ready")
	p.State = pod.StateStopped
	l.touch(key)
	l.save(p)
}
