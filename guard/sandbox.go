package guard

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cri-guard/cri-guard/evictor"
	"github.com/cri-guard/cri-guard/pod"
)

// afterRuntimeTimeout bounds the bookkeeping done after containerd answered,
// independent of the kubelet's deadline: a call is never failed after
// containerd succeeded.
const afterRuntimeTimeout = 10 * time.Second

// AdmitSandbox is HandlePodAdditions for one RunPodSandbox: it runs the pod
// through admission on the loop goroutine and, when admitted, writes the
// pending checkpoint before the call may be forwarded. An error means the
// call must not be forwarded.
func (l *Loop) AdmitSandbox(ctx context.Context, p *pod.Pod) (evictor.Result, error) {
	var r evictor.Result
	p.State = pod.StatePending
	if err := l.do(ctx, func() { r = l.handleAddition(p) }); err != nil {
		return r, fmt.Errorf("admit pod %q: %w", p.String(), err)
	}
	if !r.Admit {
		return r, nil
	}
	if err := l.checkpoint(p); err != nil {
		l.forget(p.Key())
		return r, err
	}
	return r, nil
}

// handleAddition decides one added pod (loop goroutine).
func (l *Loop) handleAddition(p *pod.Pod) evictor.Result {
	for _, w := range p.Warnings {
		l.log.WithFields(podFields(p)).WithField("warning", w).Warn("pod sandbox config")
	}
	r := l.ev.Admit(&evictor.Attributes{Pod: p})
	fields := podFields(p)
	if !r.Admit {
		l.log.WithFields(fields).WithField("reason", r.Reason).WithField("message", r.Message).Info("pod sandbox refused")
		return r
	}
	if old, ok := l.pods[p.Key()]; ok && old.SandboxID != "" {
		// a retry of an attempt that already has a sandbox: keep what we
		// know, its state included (a ready pod must stay rankable)
		p.SandboxID, p.State = old.SandboxID, old.State
	}
	l.pods[p.Key()] = p.Clone()
	l.publish()
	l.log.WithFields(fields).Debug("pod sandbox admitted")
	return r
}

// forget drops a pod that never got a sandbox.
func (l *Loop) forget(key string) {
	ctx, cancel := context.WithTimeout(context.Background(), afterRuntimeTimeout)
	defer cancel()
	_ = l.do(ctx, func() {
		if p, ok := l.pods[key]; ok && p.SandboxID == "" {
			delete(l.pods, key)
			l.publish()
		}
	})
}

// SandboxCreated records the sandbox id containerd gave an admitted pod:
// checkpoint first, then the loop's state. Errors are logged, never
// returned: the kubelet must get containerd's success.
func (l *Loop) SandboxCreated(p *pod.Pod, sandboxID string) {
	p.SandboxID = sandboxID
	p.State = pod.StateReady
	_ = l.checkpoint(p) // logged; start-up reconciliation completes the pending record
	ctx, cancel := context.WithTimeout(context.Background(), afterRuntimeTimeout)
	defer cancel()
	c := p.Clone()
	if err := l.do(ctx, func() { l.pods[c.Key()] = c; l.publish() }); err != nil {
		l.log.WithError(err).WithFields(podFields(p)).Warn("cannot record created sandbox")
	}
}

// SandboxFailed is told that containerd refused RunPodSandbox. When the
// error says the sandbox certainly does not exist the pending record is
// dropped; when it is ambiguous (deadline, lost connection) it is kept for
// start-up reconciliation to settle.
func (l *Loop) SandboxFailed(p *pod.Pod, err error) {
	switch status.Code(err) {
	case codes.DeadlineExceeded, codes.Canceled, codes.Unknown:
		return
	}
	if p.SandboxID != "" {
		return // a retry of an attempt whose sandbox exists: its record stays
	}
	if derr := l.store.Delete(p.Key()); derr != nil {
		l.log.WithError(derr).WithFields(podFields(p)).Warn("cannot delete checkpoint")
	}
	l.forget(p.Key())
}

// SandboxStopped marks the sandbox stopped (StopPodSandbox succeeded).
func (l *Loop) SandboxStopped(sandboxID string) {
	l.update(sandboxID, func(p *pod.Pod) bool {
		if p.State == pod.StateStopped {
			return false
		}
		p.State = pod.StateStopped
		_ = l.checkpoint(p)
		return true
	})
}

// SandboxRemoved forgets the sandbox and deletes its checkpoint
// (RemovePodSandbox succeeded).
func (l *Loop) SandboxRemoved(sandboxID string) {
	ctx, cancel := context.WithTimeout(context.Background(), afterRuntimeTimeout)
	defer cancel()
	_ = l.do(ctx, func() { l.removeSandbox(sandboxID) })
}

// removeSandbox drops the pod with this sandbox (loop goroutine).
func (l *Loop) removeSandbox(sandboxID string) {
	p := l.bySandbox(sandboxID)
	if p == nil {
		return
	}
	if err := l.store.Delete(p.Key()); err != nil {
		l.log.WithError(err).WithFields(podFields(p)).Warn("cannot delete checkpoint")
	}
	delete(l.pods, p.Key())
	l.publish()
}

// update applies f to the pod with this sandbox on the loop goroutine.
func (l *Loop) update(sandboxID string, f func(p *pod.Pod) bool) {
	ctx, cancel := context.WithTimeout(context.Background(), afterRuntimeTimeout)
	defer cancel()
	_ = l.do(ctx, func() {
		if p := l.bySandbox(sandboxID); p != nil && f(p) {
			l.publish()
		}
	})
}

// RefusedError is the error AdmitPod returns for a refused pod; the server
// maps it to codes.ResourceExhausted with "<reason>: <message>".
type RefusedError struct{ Reason, Message string }

func (e *RefusedError) Error() string { return e.Reason + ": " + e.Message }

// AdmissionRefused implements server.Refusal.
func (e *RefusedError) AdmissionRefused() (reason, message string) { return e.Reason, e.Message }

// AdmitPod is AdmitSandbox in the server's terms: nil when admitted (the
// pending checkpoint is written), a *RefusedError when refused.
func (l *Loop) AdmitPod(ctx context.Context, p *pod.Pod) error {
	r, err := l.AdmitSandbox(ctx, p)
	if err != nil {
		return err
	}
	if !r.Admit {
		return &RefusedError{Reason: r.Reason, Message: r.Message}
	}
	return nil
}
