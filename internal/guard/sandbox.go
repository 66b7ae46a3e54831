package guard

import (
	"context"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/evictor"
	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/runtimeproxy"
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
// record by the outcome on the loop and wait for its write. The waits are
// on the caller's goroutine, never on the loop's. A refusal is a
// *refusedError; otherwise the error is the outcome's (the runtime's,
// unchanged): a call is never failed after the runtime succeeded, whatever
// the bookkeeping does.
//
// create (the server hands it in) forwards the call to the runtime and
// says what its answer proves (runtimeproxy.RunOutcome): created, with
// the sandbox's id; refused because the sandbox it names holds this
// attempt's name (containerd's "is reserved for": an earlier call created
// it and its answer was lost, cri-guard killed under it), settled with
// that sandbox as the runtime reports it (settleReserved); certainly not
// created, the pending record dropped; or maybe created (deadline, lost
// connection, a success whose answer names no sandbox), the pending
// record kept, unsettled, for a listing or start-up reconciliation.
func (l *Loop) RunPodSandbox(ctx context.Context, p *pod.Pod, create func(ctx context.Context) runtimeproxy.RunOutcome) (string, error) {
	p.State, p.SandboxID = pod.StatePending, ""
	var (
		r       evictor.Result
		kept    *pod.Pod        // the record of a retried attempt that has its sandbox
		pending <-chan struct{} // closed once the pending record is written
	)
	if err := l.do(ctx, func() { r, kept, pending = l.admitAddition(p) }); err != nil {
		return "", fmt.Errorf("admit pod %q: %w", p.String(), err)
	}
	if !r.Admit {
		return "", &refusedError{Reason: r.Reason, Message: r.Message}
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
			_ = l.doEventually(settle, func() { ended(); l.settleNotCreated(p, kept) })
			return "", fmt.Errorf("record pod %q: %w", p.String(), ctx.Err())
		}
	}

	o := create(ctx)

	// what the outcome records, on the loop
	var record func() <-chan struct{}
	switch o.Kind() {
	case runtimeproxy.RunCreated:
		record = func() <-chan struct{} { return l.settleCreated(p, o.SandboxID(), pod.StateReady) }
	case runtimeproxy.RunReserved:
		record = l.settleReserved(settle, p, kept, o.SandboxID())
	case runtimeproxy.RunNotCreated:
		record = func() <-chan struct{} { l.settleNotCreated(p, kept); return nil }
	default: // runtimeproxy.RunMaybeCreated
		record = func() <-chan struct{} { l.settleMaybeCreated(p, kept); return nil }
	}
	// settled is closed once the settled record is written
	settled, serr := l.settleOnLoop(settle, func() <-chan struct{} { ended(); return record() })
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
	if o.Kind() != runtimeproxy.RunCreated {
		return "", o.Err() // a refusal's id names the sandbox holding the name, not one created
	}
	return o.SandboxID(), nil
}

// settleOnLoop runs f on the loop, never dropped (doEventually), and
// returns the channel of the record write f queued, when f ran before ctx
// ended; run later, its channel goes unread.
func (l *Loop) settleOnLoop(ctx context.Context, f func() <-chan struct{}) (<-chan struct{}, error) {
	var ch <-chan struct{}
	if err := l.doEventually(ctx, func() { ch = f() }); err != nil {
		return nil, err
	}
	return ch, nil
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
	if old, ok := l.pods[p.Key()]; ok && !pending(old) {
		// a retry of an attempt that already has a sandbox: keep what we
		// know, its state included (a ready pod must stay rankable)
		return r, old, nil
	}
	// A failed write does not refuse the pod: cri-guard's bookkeeping must
	// never stop the node's pods, critical ones least of all. The record is
	// kept in memory and written again (recordWrites); if cri-guard
	// restarts before that, reconciliation adopts the sandbox containerd
	// runs.
	// This call settles the record (callEnded); an unsettled deadline
	// stays: an earlier call's sandbox may still appear.
	l.calls[p.Key()]++
	l.pods[p.Key()] = p.Clone()
	pending := l.recorded(l.pods[p.Key()], true)
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

// settleReserved is what a RunPodSandbox the runtime refused because
// sandbox id holds the attempt's name records, run on the loop; the
// runtime is asked for that sandbox here, off the loop (caller's
// goroutine). When it is this attempt's, the record takes it, ready or
// not as the runtime says; when the runtime cannot show it (still being
// created by the lost call, or being rolled back) the pending record
// stays, as for any outcome that may have created a sandbox. A retried
// attempt whose record has its sandbox (kept) keeps it.
func (l *Loop) settleReserved(ctx context.Context, p, kept *pod.Pod, id string) func() <-chan struct{} {
	if kept != nil {
		return func() <-chan struct{} { l.settleMaybeCreated(p, kept); return nil }
	}
	state, err := l.sandboxState(ctx, p, id)
	if err != nil {
		l.log.WithFields(podFields(p)).WithField("pod_sandbox_id", id).WithError(err).
			Info("the runtime says a sandbox holds this attempt's name, but does not show it: the pending record stays")
		return func() <-chan struct{} { l.settleMaybeCreated(p, nil); return nil }
	}
	l.log.WithFields(podFields(p)).WithField("pod_sandbox_id", id).WithField("state", state).
		Info("this attempt's sandbox was created by a call whose answer was lost: recorded")
	return func() <-chan struct{} { return l.settleCreated(p, id, state) }
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
// only if it is still pending, or already names this sandbox.
func (l *Loop) settleCreated(p *pod.Pod, sandboxID string, state pod.State) <-chan struct{} {
	cur, ok := l.pods[p.Key()]
	if ok && !pending(cur) && cur.SandboxID != sandboxID {
		return nil // another call settled this attempt with another sandbox
	}
	if !ok {
		cur = p.Clone()
	}
	cur.SandboxID, cur.State = sandboxID, state
	delete(l.unsettled, p.Key())
	l.pods[p.Key()] = cur
	// a crash before it is written: start-up reconciliation completes the
	// pending record
	return l.recorded(cur, true)
}

// settleNotCreated settles a RunPodSandbox whose outcome says for certain
// that no sandbox exists (loop goroutine): the pending record is dropped,
// unless another call of the attempt is in flight or an earlier one's
// sandbox may still appear (unsettled: the grace decides). A retried
// attempt whose sandbox exists (kept) keeps its record.
func (l *Loop) settleNotCreated(p *pod.Pod, kept *pod.Pod) {
	l.log.WithFields(podFields(p)).WithField("kept", kept != nil).Debug("pod sandbox not created by the runtime")
	cur, ok := l.pods[p.Key()]
	if kept != nil || !ok || !pending(cur) {
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

// settleMaybeCreated settles a RunPodSandbox whose outcome leaves a
// sandbox possible, its id not known (loop goroutine): the pending record
// is kept, unsettled, for a listing of the runtime (or start-up
// reconciliation) to complete, or to drop once pendingGrace has passed
// without its sandbox and with no call in flight. A retried attempt whose
// sandbox exists (kept) keeps its record.
func (l *Loop) settleMaybeCreated(p *pod.Pod, kept *pod.Pod) {
	l.log.WithFields(podFields(p)).WithField("kept", kept != nil).Debug("pod sandbox may have been created: its id is not known")
	cur, ok := l.pods[p.Key()]
	if kept != nil || !ok || !pending(cur) {
		return
	}
	l.unsettled[p.Key()] = l.now().Add(pendingGrace)
}

// pending reports whether p's record is pending: admitted, its sandbox
// not known yet. A pending record has no sandbox id, and a record with no
// sandbox id is pending (recordPod reads older records so).
func pending(p *pod.Pod) bool { return p.State == pod.StatePending }

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

// refusedError is the error RunPodSandbox returns for a refused pod; the
// server maps it to codes.ResourceExhausted with "<reason>: <message>".
type refusedError struct{ Reason, Message string }

func (e *refusedError) Error() string { return e.Reason + ": " + e.Message }

// AdmissionRefused implements server.Refusal.
func (e *refusedError) AdmissionRefused() (reason, message string) { return e.Reason, e.Message }
