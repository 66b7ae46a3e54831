package guard

import (
	"context"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/evictor"
	"github.com/cri-guard/cri-guard/pod"
)

// RestoreReport says what start-up reconciliation did. Evicting counts
// the refused pods queued for eviction (EnforceRestored).
type RestoreReport struct {
	Records, Dropped, Completed, Unsettled, Adopted, Admitted, Refused, Evicting int
}

// pendingGrace is how long a pending record whose sandbox the runtime does
// not list is kept (unsettled) before a listing without it drops it: a
// RunPodSandbox cut off under cri-guard may still be creating its sandbox
// (the name is reserved, the sandbox not listed yet), and the kubelet's
// own deadline for the call (runtimeRequestTimeout) is 2 minutes.
const pendingGrace = 2 * time.Minute

// Restore loads the checkpoints, reconciles them with what the runtime runs,
// and replays the live pods as one RESTORE update through admission, oldest
// first. Restored pods that admission refuses are queued for eviction
// when EnforceRestored is set (the loop stops them as every other
// eviction, first), else logged. It must run before Run; it returns once
// the records it changed are written.
func (l *Loop) Restore(ctx context.Context) (RestoreReport, error) {
	rep, err := l.restore(ctx)
	if ferr := l.w.flush(ctx); ferr != nil {
		l.log.WithError(ferr).Warn("restore: checkpoint writes not finished")
	}
	return rep, err
}

// ServeDegraded lets the loop serve although Restore has not succeeded
// (the runtime cannot be listed: too large an answer, a runtime that stays
// down): admission works on what it sees from now on, and RetryRestore
// completes the restore later. It must be called before Run.
func (l *Loop) ServeDegraded(cause error) {
	l.degraded.Store(&cause)
}

// Degraded returns why the loop serves without a finished restore; nil
// once restored. Safe from any goroutine.
func (l *Loop) Degraded() error {
	if p := l.degraded.Load(); p != nil {
		return *p
	}
	return nil
}

// RetryRestore runs the restore on the loop goroutine (the loop serves
// meanwhile, degraded), bounded by ctx; on success the loop is no longer
// degraded.
func (l *Loop) RetryRestore(ctx context.Context) (RestoreReport, error) {
	var (
		rep RestoreReport
		err error
	)
	if derr := l.do(ctx, func() { rep, err = l.restore(ctx) }); derr != nil {
		return rep, derr
	}
	if err == nil {
		l.degraded.Store(nil)
	} else {
		l.degraded.Store(&err)
	}
	return rep, err
}

// restore is Restore's work (before Run, or on the loop goroutine).
func (l *Loop) restore(ctx context.Context) (RestoreReport, error) {
	var rep RestoreReport
	recs, err := l.store.List()
	if err != nil {
		return rep, fmt.Errorf("restore: %w", err)
	}
	sbs, err := l.rt.ListPodSandbox(ctx, nil)
	if err != nil {
		return rep, fmt.Errorf("restore: %w", err)
	}
	rep.Records = len(recs)
	byID := make(map[string]*runtimeapi.PodSandbox, len(sbs))
	byKey := make(map[string]*runtimeapi.PodSandbox, len(sbs))
	for _, sb := range sbs {
		byID[sb.GetId()] = sb
		md := sb.GetMetadata()
		byKey[pod.Key(md.GetUid(), md.GetAttempt())] = sb
	}
	known := map[string]bool{}
	for _, rec := range recs {
		p := rec.Pod.Clone()
		p.State, p.SandboxID = rec.State, rec.SandboxID
		sb, ok := byID[p.SandboxID]
		if p.SandboxID == "" {
			// pending: did containerd create it before we went down?
			sb, ok = byKey[p.Key()]
			if ok {
				p.SandboxID = sb.GetId()
				rep.Completed++
			}
		}
		// a record dated after now (the clock stepped back across the
		// restart) counts as written now
		written := rec.Written
		if now := l.now(); written.After(now) {
			written = now
		}
		if !ok && p.SandboxID == "" && l.now().Sub(written) < pendingGrace {
			// cut off recently: the runtime may still be creating it; a
			// listing completes it, or drops it after pendingGrace
			rep.Unsettled++
			if l.calls[p.Key()] > 0 {
				continue // RetryRestore: a call in flight settles it
			}
			l.pods[p.Key()] = p
			l.unsettled[p.Key()] = written.Add(pendingGrace)
			l.touch(p.Key())
			continue
		}
		if !ok || known[sb.GetId()] {
			l.log.WithFields(podFields(p)).WithField("state", rec.State).Debug("restore: record dropped: the runtime has no such sandbox")
			l.drop(p.Key())
			rep.Dropped++
			continue
		}
		known[sb.GetId()] = true
		p = l.rederive(ctx, p, sb)
		if !p.EvictedAt.IsZero() {
			l.ev.MarkEvicted(p, p.EvictedAt)
		}
		p.State = stateOf(sb)
		if p.Created.IsZero() {
			p.Created = timeOf(sb)
		}
		l.pods[p.Key()] = p
		l.touch(p.Key())
		if p.State != rec.State || p.SandboxID != rec.SandboxID {
			l.save(p)
		}
	}
	for _, sb := range sbs {
		if known[sb.GetId()] || sb.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		p, err := l.adopt(ctx, sb)
		if err != nil {
			l.log.WithError(err).WithField("pod_sandbox_id", sb.GetId()).Warn("cannot adopt sandbox")
			continue
		}
		if _, dup := l.pods[p.Key()]; dup {
			continue
		}
		l.pods[p.Key()] = p
		l.touch(p.Key())
		l.save(p)
		rep.Adopted++
	}
	l.ev.Observe() // admission reads this evaluation
	restored := l.active()
	for _, p := range restored {
		r := l.ev.Admit(&evictor.Attributes{Pod: p, Restored: true})
		if r.Admit {
			rep.Admitted++
			continue
		}
		rep.Refused++
		fields := podFields(p)
		if !l.cfg.EnforceRestored {
			l.log.WithFields(fields).WithField("message", r.Message).Warn("restored pod would be refused (restoredPods: warn)")
			continue
		}
		e := l.ev.EvictRestored(p.Clone(), r)
		if e == nil {
			continue // dry run
		}
		l.log.WithFields(fields).WithField("message", r.Message).Warn("restored pod refused: queued for eviction")
		l.refused = append(l.refused, e)
		rep.Evicting++
	}
	l.publish()
	l.log.WithField("records", rep.Records).WithField("dropped", rep.Dropped).WithField("completed", rep.Completed).WithField("unsettled", rep.Unsettled).
		WithField("adopted", rep.Adopted).WithField("admitted", rep.Admitted).WithField("refused", rep.Refused).
		WithField("evicting", rep.Evicting).Info("restore done")
	return rep, nil
}

// rederive takes from containerd what it can tell of a restored pod (the
// sandbox's own config: namespace, annotations, cgroup parent, so critical,
// static and QoS) and from the record only what only cri-guard knows (when
// it first saw the pod, whether it evicted it): a forged or stale record
// cannot make a critical pod evictable. When containerd cannot say, the
// record stands.
func (l *Loop) rederive(ctx context.Context, rec *pod.Pod, sb *runtimeapi.PodSandbox) *pod.Pod {
	fresh, err := l.adopt(ctx, sb)
	if err != nil || len(fresh.Warnings) > 0 {
		// no verbose config from this runtime: nothing better than the record
		return rec
	}
	if fresh.Critical != rec.Critical || fresh.Static != rec.Static || fresh.QOS != rec.QOS || fresh.Evictable != rec.Evictable {
		l.log.WithFields(podFields(rec)).WithField("record_critical", rec.Critical).WithField("runtime_critical", fresh.Critical).
			WithField("record_qos", rec.QOS).WithField("runtime_qos", fresh.QOS).
			Warn("checkpoint disagrees with the sandbox's own config: the runtime's is kept")
	}
	fresh.Created, fresh.EvictedAt, fresh.Attempt = rec.Created, rec.EvictedAt, rec.Attempt
	fresh.SandboxID = sb.GetId()
	return fresh
}

// adopt builds a pod for a ready sandbox that has no checkpoint.
func (l *Loop) adopt(ctx context.Context, sb *runtimeapi.PodSandbox) (*pod.Pod, error) {
	st, err := l.rt.PodSandboxStatus(ctx, sb.GetId())
	if err != nil {
		return nil, err
	}
	p, err := pod.FromSandboxStatus(st.GetStatus(), st.GetInfo(), l.cfg.Rules)
	if err != nil {
		return nil, fmt.Errorf("adopt sandbox %q: %w", sb.GetId(), err)
	}
	p.State = pod.StateReady
	return p, nil
}

func stateOf(sb *runtimeapi.PodSandbox) pod.State {
	if sb.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY {
		return pod.StateReady
	}
	return pod.StateStopped
}

func timeOf(sb *runtimeapi.PodSandbox) time.Time { return time.Unix(0, sb.GetCreatedAt()) }
