package guard

import (
	"context"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/evictor"
	"github.com/cri-guard/cri-guard/pod"
)

// defaultAfterRuntimeTimeout is Config.AfterRuntimeTimeout's default: how
// long a CRI call waits for the bookkeeping done after containerd answered,
// independent of the kubelet's deadline (a call is never failed after
// containerd succeeded, and the outcome is recorded however late).
const defaultAfterRuntimeTimeout = 10 * time.Second

// RunPodSandbox is HandlePodAdditions for one RunPodSandbox, the whole
// operation in one place (the walk in the package doc): admit p on the
// loop; when admitted, wait for its pending record's write; forward
// through create (off the loop: the runtime may take seconds); settle the
// record with the outcome on the loop and wait for its write. The waits
// are on the caller's goroutine, never on the loop's. A refusal is a
// *RefusedError; any error means the kubelet gets an error. Once create
// succeeded, its success is returned whatever the bookkeeping does.
//
// create (the server hands it in) forwards the call to the runtime and
// returns the new sandbox's id; on error, notCreated is true when the
// runtime's answer says for certain that no sandbox exists, false when one
// may (deadline, lost connection): its pending record is then kept,
// unsettled, for a listing or start-up reconciliation. An error with an id says the runtime named the
// sandbox that holds this attempt's name (containerd's "is reserved for":
// an earlier call created it and its answer was lost, cri-guard killed
// under it): the record is settled with that sandbox as the runtime
// reports it (settleReserved); the kubelet gets the error unchanged, and
// finds the sandbox in its own listing.
func (l *Loop) RunPodSandbox(ctx context.Context, p *pod.Pod, create func(ctx context.Context) (sandboxID string, notCreated bool, err error)) (string, error) {
	p.State = pod.StatePending
	var (
		r       evictor.Result
		kept    *pod.Pod        // the record of a retried attempt that has its sandbox
		pending <-chan struct{} // closed once the pending record is written
	)
	if err := l.do(ctx, func() { r, kept, pending = l.admitAddition(p) }); err != nil {
		return "", fmt.Errorf("admit pod %q: %w", p.String(), err)
	}
	if !r.Admit {
		return "", &RefusedError{Reason: r.Reason, Message: r.Message}
	}
	// ended tells the loop this call no longer settles its pending record
	// (run on the loop, first thing in the call's settle)
	ended := func() {
		if kept == nil {
			l.callEnded(p.Key())
		}
	}

	settle, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.AfterRuntimeTimeout)
	defer cancel()
	// the pending record is on disk before the runtime sees the pod (a
	// crash in between leaves a record that start-up reconciles); waited
	// for here, on the caller's goroutine, never on the loop's. A failed
	// write does not hold the pod back (admitAddition).
	if pending != nil {
		select {
		case <-pending:
		case <-ctx.Done():
			_ = l.doEventually(settle, func() { ended(); l.settleFailed(p, kept, true) })
			return "", fmt.Errorf("record pod %q: %w", p.String(), ctx.Err())
		}
	}

	id, notCreated, err := create(ctx)

	var (
		serr    error
		settled <-chan struct{} // closed once the settled record is written
	)
	if err != nil {
		var ch <-chan struct{}
		if id != "" && kept == nil {
			serr = l.settleReserved(settle, p, id, ended, &ch)
		} else {
			serr = l.doEventually(settle, func() { ended(); l.settleFailed(p, kept, notCreated) })
		}
		id = "" // an id comes with a refusal only to name the sandbox that holds the name
		if serr == nil {
			settled = ch
		}
	} else {
		var ch <-chan struct{}
		// ch is read only once the closure ran (serr nil); a late run
		// writes it with nobody reading
		serr = l.doEventually(settle, func() { ended(); ch = l.settleCreated(p, id, pod.StateReady) })
		if serr == nil {
			settled = ch
		}
	}
	if settled != nil {
		// the answer goes out once the record names its sandbox, as it did
		// when the loop wrote it: a record the kubelet's answer contradicts
		// is never left behind a running cri-guard (waited for here, never
		// on the loop; a crash meanwhile leaves the pending record, which
		// start-up completes)
		select {
		case <-settled:
		case <-settle.Done():
		}
	}
	if serr != nil {
		// recorded late, or (cri-guard stopping) start-up reconciliation
		// completes or drops the pending record
		l.log.WithError(serr).WithFields(podFields(p)).Warn("the runtime's answer is not recorded yet")
	}
	return id, err
}

// admitAddition decides one added pod and, when admitted, records it as
// pending and queues its record's write, whose channel it returns (loop
// goroutine). A retry of an attempt that already has a sandbox keeps that
// record as it is and returns it.
func (l *Loop) admitAddition(p *pod.Pod) (evictor.Result, *pod.Pod, <-chan struct{}) {
	for _, w := range p.Warnings {
		l.log.WithFields(podFields(p)).WithField("warning", w).Warn("pod sandbox config")
	}
	if l.api != nil {
		if a, ok := l.api.Pod(p.UID); ok {
			l.cfg.Rules.ApplyAPI(p, a)
		}
	}
	r := l.ev.Admit(&evictor.Attributes{Pod: p})
	fields := podFields(p)
	if !r.Admit {
		l.log.WithFields(fields).WithField("reason", r.Reason).WithField("message", r.Message).Info("pod sandbox refused")
		if l.report != nil && p.FromAPI && l.neverRan(p) {
			// as the kubelet's rejectPod: the pod fails, the kubelet stops
			// retrying it and its controller replaces it
			l.report.Rejected(p, r.Reason, r.Message)
		}
		return r, nil, nil
	}
	if old, ok := l.pods[p.Key()]; ok && old.SandboxID != "" {
		// a retry of an attempt that already has a sandbox: keep what we
		// know, its state included (a ready pod must stay rankable)
		return r, old, nil
	}
	// A failed write does not refuse the pod: cri-guard's bookkeeping must
	// never stop the node's pods, critical ones least of all. The record is
	// kept in memory and written again (recordWrites); if cri-guard
	// restarts before that, reconciliation adopts the sandbox containerd
	// runs.
	pending := l.saveAwaited(p)
	// this call settles the record (callEnded); an unsettled deadline
	// stays: an earlier call's sandbox may still appear
	l.calls[p.Key()]++
	l.pods[p.Key()] = p.Clone()
	l.touch(p.Key())
	l.publish()
	l.log.WithFields(fields).Debug("pod sandbox admitted")
	return r, nil, pending
}

// neverRan reports whether p is a first attempt of a pod that has no
// sandbox on this node: only such a refusal is the kubelet's rejectPod (a
// recreation, attempt > 0, is the kubelet restarting a pod that ran).
func (l *Loop) neverRan(p *pod.Pod) bool {
	if p.Attempt > 0 {
		return false
	}
	for _, q := range l.pods {
		if q.UID == p.UID {
			return false
		}
	}
	return true
}

// settleReserved settles a RunPodSandbox the runtime refused because
// sandbox id holds the attempt's name (caller's goroutine; ended runs
// first on the loop; ch gets the settled record's write). The runtime is asked for that sandbox, off the
// loop: when it is this attempt's, the record takes it, ready or not as
// the runtime says; when the runtime cannot show it (still being created
// by the lost call, or being rolled back) the pending record stays, as for
// any ambiguous failure.
func (l *Loop) settleReserved(ctx context.Context, p *pod.Pod, id string, ended func(), ch *<-chan struct{}) error {
	state, err := l.sandboxState(ctx, p, id)
	if err != nil {
		l.log.WithFields(podFields(p)).WithField("pod_sandbox_id", id).WithError(err).
			Info("the runtime says a sandbox holds this attempt's name, but does not show it: the pending record stays")
		return l.doEventually(ctx, func() { ended(); l.settleFailed(p, nil, false) })
	}
	l.log.WithFields(podFields(p)).WithField("pod_sandbox_id", id).WithField("state", state).
		Info("this attempt's sandbox was created by a call whose answer was lost: recorded")
	return l.doEventually(ctx, func() { ended(); *ch = l.settleCreated(p, id, state) })
}

// sandboxState asks the runtime for sandbox id and returns its state as a
// record keeps it, when it is p's attempt (caller's goroutine).
func (l *Loop) sandboxState(ctx context.Context, p *pod.Pod, id string) (pod.State, error) {
	resp, err := l.rt.PodSandboxStatus(ctx, id)
	if err != nil {
		return "", err
	}
	st := resp.GetStatus()
	md := st.GetMetadata()
	if md.GetUid() != p.UID || md.GetAttempt() != p.Attempt || st.GetId() != id {
		return "", fmt.Errorf("sandbox %q is pod %s attempt %d, not this one", id, md.GetUid(), md.GetAttempt())
	}
	if st.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY {
		return pod.StateReady, nil
	}
	return pod.StateStopped, nil
}

// settleCreated records the sandbox id containerd gave an admitted pod,
// in state (ready when the call created it), and queues its record's
// write, whose channel it returns (loop goroutine). The record is updated
// only if it is still the pending one this call wrote.
func (l *Loop) settleCreated(p *pod.Pod, sandboxID string, state pod.State) <-chan struct{} {
	cur, ok := l.pods[p.Key()]
	if ok && cur.SandboxID != "" && cur.SandboxID != sandboxID {
		return nil // another call settled this attempt with another sandbox
	}
	if !ok {
		cur = p.Clone()
	}
	cur.SandboxID, cur.State = sandboxID, state
	delete(l.unsettled, p.Key())
	l.pods[p.Key()] = cur
	l.touch(p.Key())
	done := l.saveAwaited(cur) // a crash before it is written: start-up reconciliation completes the pending record
	l.publish()
	return done
}

// settleFailed settles a RunPodSandbox that containerd answered with an
// error (loop goroutine). When the error says for certain that no sandbox
// exists the pending record is dropped, unless another call of the
// attempt is in flight or an earlier one's sandbox may still appear; when
// it is ambiguous it is kept, unsettled, for a listing of the runtime (or
// start-up reconciliation) to complete, or to drop once pendingGrace has
// passed without its sandbox and with no call in flight. A retried
// attempt whose sandbox exists keeps its record.
func (l *Loop) settleFailed(p *pod.Pod, kept *pod.Pod, notCreated bool) {
	l.log.WithFields(podFields(p)).WithField("not_created", notCreated).WithField("kept", kept != nil).Debug("pod sandbox not created by the runtime")
	if kept != nil {
		return
	}
	cur, ok := l.pods[p.Key()]
	if !ok || cur.SandboxID != "" {
		return
	}
	if !notCreated {
		// this call's sandbox may appear: a listing completes the record,
		// or drops it once the grace has passed and no call is in flight
		l.unsettled[p.Key()] = l.now().Add(pendingGrace)
		return
	}
	if l.calls[p.Key()] > 0 {
		return // another call in flight settles it
	}
	if _, ok := l.unsettled[p.Key()]; ok {
		return // an earlier call's sandbox may still appear: the grace decides
	}
	l.drop(p.Key())
	delete(l.pods, p.Key())
	l.publish()
}

// callEnded records that one RunPodSandbox call of key, which admitted a
// pending record, no longer settles it (loop goroutine).
func (l *Loop) callEnded(key string) {
	if l.calls[key]--; l.calls[key] <= 0 {
		delete(l.calls, key)
	}
}

// SandboxStopped marks the sandbox stopped (StopPodSandbox succeeded).
func (l *Loop) SandboxStopped(sandboxID string) {
	l.update(sandboxID, func(p *pod.Pod) bool {
		if p.State == pod.StateStopped {
			return false
		}
		p.State = pod.StateStopped
		l.touch(p.Key())
		l.save(p)
		return true
	})
}

// SandboxRemoved forgets the sandbox and deletes its checkpoint
// (RemovePodSandbox succeeded).
func (l *Loop) SandboxRemoved(sandboxID string) {
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.AfterRuntimeTimeout)
	defer cancel()
	_ = l.doEventually(ctx, func() { l.removeSandbox(sandboxID) })
}

// removeSandbox drops the pod with this sandbox (loop goroutine).
func (l *Loop) removeSandbox(sandboxID string) {
	p := l.bySandbox(sandboxID)
	if p == nil {
		return
	}
	l.drop(p.Key())
	delete(l.pods, p.Key())
	l.publish()
}

// update applies f to the pod with this sandbox on the loop goroutine.
func (l *Loop) update(sandboxID string, f func(p *pod.Pod) bool) {
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.AfterRuntimeTimeout)
	defer cancel()
	_ = l.doEventually(ctx, func() {
		if p := l.bySandbox(sandboxID); p != nil && f(p) {
			l.publish()
		}
	})
}

// RefusedError is the error RunPodSandbox returns for a refused pod; the
// server maps it to codes.ResourceExhausted with "<reason>: <message>".
type RefusedError struct{ Reason, Message string }

func (e *RefusedError) Error() string { return e.Reason + ": " + e.Message }

// AdmissionRefused implements server.Refusal.
func (e *RefusedError) AdmissionRefused() (reason, message string) { return e.Reason, e.Message }
