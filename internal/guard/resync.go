package guard

import (
	"context"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/pod"
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

// recorded is what follows an outcome the loop recorded in p, the record
// in l.pods: its generation (touch), the status snapshot (publish), then
// its durable write (saveAs; awaited: the returned channel is closed once
// it is written) (loop goroutine).
func (l *Loop) recorded(p *pod.Pod, awaited bool) <-chan struct{} {
	l.touch(p.Key())
	l.publish()
	return l.saveAs(p, awaited)
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
	since, started := l.gen, l.now()
	go func() {
		sbs, err := l.listSandboxes(ctx)
		l.post(func() {
			l.listing = false
			l.applyListing(since, started, sbs, err)
		})
	}()
}

// relist lists the runtime's sandboxes on the caller's goroutine (the
// event stream's, once it broke: what it missed is in no event) and
// applies the listing on the loop; the loop waits on neither the runtime
// nor the caller.
func (l *Loop) relist(ctx context.Context) {
	var (
		since   uint64
		started time.Time
	)
	if err := l.do(ctx, func() { since, started = l.gen, l.now() }); err != nil {
		return
	}
	sbs, err := l.listSandboxes(ctx)
	_ = l.do(ctx, func() { l.applyListing(since, started, sbs, err) })
}

// listSandboxes is one ListPodSandbox, bounded by resyncTimeout (off the
// loop).
func (l *Loop) listSandboxes(ctx context.Context) ([]*runtimeapi.PodSandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, resyncTimeout)
	defer cancel()
	return l.rt.ListPodSandbox(ctx, nil)
}

// applyListing makes the known pods agree with a listing started at
// generation since, at started (loop goroutine): a sandbox that is no
// longer ready is stopped, one that is gone is removed, one ready again is
// a candidate again; a record touched since the listing started keeps what
// the newer outcome said. A pending record takes the sandbox the listing
// shows for its attempt (the call that made it lost its answer, or is
// about to get it); an unsettled one the listing does not show is dropped
// once its grace has passed (settlePending).
func (l *Loop) applyListing(since uint64, started time.Time, sbs []*runtimeapi.PodSandbox, err error) {
	if err != nil {
		l.log.WithError(err).Debug("resync: cannot list sandboxes")
		return
	}
	states := make(map[string]runtimeapi.PodSandboxState, len(sbs))
	var byKey map[string]*runtimeapi.PodSandbox // built for the first pending record
	for _, sb := range sbs {
		states[sb.GetId()] = sb.GetState()
	}
	changed := false
	for key, p := range l.pods {
		if l.changed[key] > since {
			continue // an outcome newer than the listing
		}
		if pending(p) {
			if byKey == nil {
				byKey = make(map[string]*runtimeapi.PodSandbox, len(sbs))
				for _, sb := range sbs {
					md := sb.GetMetadata()
					byKey[pod.Key(md.GetUid(), md.GetAttempt())] = sb
				}
			}
			changed = l.settlePending(key, p, byKey[key], started) || changed
			continue
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

// settlePending settles a pending record by a listing started at started
// that shows sb for its attempt (nil: none) (loop goroutine; the caller
// publishes): the record takes sb, ready or stopped as listed; an
// unsettled record whose grace ended before the listing started is
// dropped. It reports whether it changed anything.
func (l *Loop) settlePending(key string, p *pod.Pod, sb *runtimeapi.PodSandbox, started time.Time) bool {
	if sb == nil {
		deadline, ok := l.unsettled[key]
		if !ok || started.Before(deadline) || l.calls[key] > 0 {
			return false // its call (or a retry) is in flight, or within the grace
		}
		l.log.WithFields(podFields(p)).WithField("grace", pendingGrace).Info("pending record dropped: the runtime shows no sandbox of this attempt")
		l.drop(key)
		delete(l.pods, key)
		return true
	}
	p.SandboxID, p.State = sb.GetId(), stateOf(sb)
	if p.Created.IsZero() {
		p.Created = timeOf(sb)
	}
	delete(l.unsettled, key)
	l.log.WithFields(podFields(p)).WithField("state", p.State).Info("pending record completed from the runtime's listing")
	l.touch(key)
	l.save(p)
	return true
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
