package guard

import (
	"context"
	"errors"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/checkpoint"
	"github.com/cri-guard/cri-guard/internal/evictor"
	"github.com/cri-guard/cri-guard/internal/pod"
)

// RestoreReport says what start-up reconciliation did. Evicting counts
// the refused pods queued for eviction (EnforceRestored).
type RestoreReport struct {
	Records, Dropped, Completed, Unsettled, Adopted, Admitted, Refused, Evicting int
	// Newer counts the records a retried restore left as the loop had
	// them: an outcome recorded since the restore read them is newer.
	Newer int
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
	if ferr := l.saves.w.Flush(ctx); ferr != nil {
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

// RetryRestore completes a restore while the loop serves, degraded: the
// records, the runtime's sandboxes and their statuses are read on the
// caller's goroutine, bounded by ctx, and applied on the loop (the loop
// never waits on the disk or the runtime); on success the loop is no
// longer degraded. The read is a picture taken while the loop went on: a
// pod whose outcome the loop recorded since the read started (admitted,
// created, stopped, removed while degraded) keeps what its outcome said.
func (l *Loop) RetryRestore(ctx context.Context) (RestoreReport, error) {
	var (
		rep   RestoreReport
		since uint64
		werr  error
	)
	if err := l.do(ctx, func() { since, werr = l.watchRestore() }); err != nil {
		return rep, err
	}
	if werr != nil {
		return rep, werr
	}
	read, err := l.readRestore(ctx)
	if derr := l.do(ctx, func() {
		if err == nil {
			rep = l.applyRestore(since, read)
		}
		l.restoreDrops = nil // the read failed: watched no longer
	}); derr != nil {
		// the loop never took the apply: nothing was restored, and the
		// drops watched for it are watched no longer
		l.post(func() { l.restoreDrops = nil })
		return rep, derr
	}
	if err == nil {
		l.degraded.Store(nil)
	} else {
		l.degraded.Store(&err)
	}
	return rep, err
}

// errRestoreUnderWay refuses a retried restore while another one reads.
var errRestoreUnderWay = errors.New("restore: another restore is under way")

// watchRestore marks a retried restore's read as started (loop
// goroutine): from now on a dropped record is remembered (drop), as a
// read that started before the drop may still show it. It returns the
// generation the read starts at.
func (l *Loop) watchRestore() (uint64, error) {
	if l.restoreDrops != nil {
		return 0, errRestoreUnderWay
	}
	l.restoreDrops = map[string]bool{}
	return l.gen, nil
}

// restore is Restore's work, before Run: read and apply at once.
func (l *Loop) restore(ctx context.Context) (RestoreReport, error) {
	read, err := l.readRestore(ctx)
	if err != nil {
		return RestoreReport{}, err
	}
	return l.applyRestore(l.gen, read), nil
}

// restoreRead is what a restore reads of the disk and the runtime: the
// records, the runtime's sandboxes, and the status of every sandbox a
// record names or that may be adopted (a ready one).
type restoreRead struct {
	recs     []checkpoint.Record
	sbs      []*runtimeapi.PodSandbox
	byID     map[string]*runtimeapi.PodSandbox
	byKey    map[string]*runtimeapi.PodSandbox // by pod key (uid, attempt)
	statuses map[string]statusRead             // by sandbox id
}

// statusRead is one PodSandboxStatus answer, as a restore read it.
type statusRead struct {
	resp *runtimeapi.PodSandboxStatusResponse
	err  error
}

// readRestore reads the records, lists the runtime's sandboxes and asks
// the status of those the restore needs, bounded by ctx (never on the
// loop: it touches no loop state).
func (l *Loop) readRestore(ctx context.Context) (restoreRead, error) {
	recs, err := l.store.List()
	if err != nil {
		return restoreRead{}, fmt.Errorf("restore: %w", err)
	}
	for i := range recs {
		recs[i] = oneEncoding(recs[i])
	}
	sbs, err := l.rt.ListPodSandbox(ctx, nil)
	if err != nil {
		return restoreRead{}, fmt.Errorf("restore: %w", err)
	}
	r := restoreRead{recs: recs, sbs: sbs,
		byID:     make(map[string]*runtimeapi.PodSandbox, len(sbs)),
		byKey:    make(map[string]*runtimeapi.PodSandbox, len(sbs)),
		statuses: make(map[string]statusRead, len(sbs)),
	}
	for _, sb := range sbs {
		r.byID[sb.GetId()] = sb
		md := sb.GetMetadata()
		r.byKey[pod.Key(md.GetUid(), md.GetAttempt())] = sb
	}
	need := map[string]bool{}
	for _, sb := range sbs {
		need[sb.GetId()] = sb.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY
	}
	for _, rec := range recs {
		if sb, ok := r.sandboxOf(rec); ok {
			need[sb.GetId()] = true
		}
	}
	for _, sb := range sbs {
		if !need[sb.GetId()] {
			continue
		}
		st, err := l.rt.PodSandboxStatus(ctx, sb.GetId())
		if ctx.Err() != nil {
			return restoreRead{}, fmt.Errorf("restore: sandbox %q status: %w", sb.GetId(), ctx.Err())
		}
		r.statuses[sb.GetId()] = statusRead{st, err}
	}
	return r, nil
}

// oneEncoding reads a record so that it is pending exactly when it names
// no sandbox (pending): an earlier release settled a success whose answer
// named no sandbox as ready with no id, and that record is pending (a
// listing finds its sandbox by its attempt); one that names a sandbox is
// not, whatever its state says (the listing gives the state).
func oneEncoding(rec checkpoint.Record) checkpoint.Record {
	switch {
	case rec.SandboxID == "":
		rec.State = pod.StatePending
	case rec.State == pod.StatePending:
		rec.State = pod.StateStopped
	}
	return rec
}

// sandboxOf is the listed sandbox a record names, or for a pending
// record (no id yet) the one listed for its attempt.
func (r *restoreRead) sandboxOf(rec checkpoint.Record) (*runtimeapi.PodSandbox, bool) {
	if rec.State != pod.StatePending {
		sb, ok := r.byID[rec.SandboxID]
		return sb, ok
	}
	sb, ok := r.byKey[rec.Pod.Key()]
	return sb, ok
}

// applyRestore reconciles what a restore read (started at generation
// since) with the loop's pods and replays the live pods through admission
// (loop goroutine, or before Run). A record whose pod an outcome touched
// since the read started, or dropped meanwhile, is left as the outcome
// said.
func (l *Loop) applyRestore(since uint64, read restoreRead) RestoreReport {
	rep := RestoreReport{Records: len(read.recs)}
	dropped := l.restoreDrops // this restore's own drops are not newer
	l.restoreDrops = nil
	newer := func(key string) bool { return l.changed[key] > since || dropped[key] }
	known := map[string]bool{}
	for _, rec := range read.recs {
		sb, ok := read.sandboxOf(rec)
		key := rec.Pod.Key()
		if newer(key) {
			rep.Newer++
			if ok {
				known[sb.GetId()] = true // not adopted from the stale picture either
			}
			continue
		}
		p := rec.Pod.Clone()
		p.State, p.SandboxID = rec.State, rec.SandboxID
		if cur, held := l.pods[key]; held {
			// served degraded: what the loop holds is at least as new as
			// the disk (whose write may not have landed yet)
			p = cur.Clone()
			if !pending(p) && p.SandboxID != rec.SandboxID {
				sb, ok = read.byID[p.SandboxID]
			}
		}
		if ok && pending(p) {
			// pending: containerd created it before we went down
			p.SandboxID = sb.GetId()
			rep.Completed++
		}
		// a record dated after now (the clock stepped back across the
		// restart) counts as written now
		written := rec.Written
		if now := l.now(); written.After(now) {
			written = now
		}
		if !ok && pending(p) && l.now().Sub(written) < pendingGrace {
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
			delete(l.pods, p.Key())
			rep.Dropped++
			continue
		}
		known[sb.GetId()] = true
		p = l.rederive(p, sb, read.statuses[sb.GetId()])
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
	for _, sb := range read.sbs {
		if known[sb.GetId()] || sb.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		p, err := l.adopt(sb, read.statuses[sb.GetId()])
		if err != nil {
			l.log.WithError(err).WithField("pod_sandbox_id", sb.GetId()).Warn("cannot adopt sandbox")
			continue
		}
		if _, dup := l.pods[p.Key()]; dup || newer(p.Key()) {
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
		l.evictions.refused = append(l.evictions.refused, e)
		rep.Evicting++
	}
	l.publish()
	l.log.WithField("records", rep.Records).WithField("dropped", rep.Dropped).WithField("completed", rep.Completed).WithField("unsettled", rep.Unsettled).
		WithField("adopted", rep.Adopted).WithField("admitted", rep.Admitted).WithField("refused", rep.Refused).
		WithField("evicting", rep.Evicting).WithField("newer", rep.Newer).Info("restore done")
	return rep
}

// rederive takes from containerd what it can tell of a restored pod (the
// sandbox's own config: namespace, annotations, cgroup parent, so critical,
// static and QoS) and from the record only what only cri-guard knows (when
// it first saw the pod, whether it evicted it): a forged or stale record
// cannot make a critical pod evictable. When containerd cannot say, the
// record stands.
func (l *Loop) rederive(rec *pod.Pod, sb *runtimeapi.PodSandbox, st statusRead) *pod.Pod {
	fresh, err := l.adopt(sb, st)
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

// adopt builds a pod for a ready sandbox that has no checkpoint, from its
// status as read (st).
func (l *Loop) adopt(sb *runtimeapi.PodSandbox, st statusRead) (*pod.Pod, error) {
	if st.err != nil {
		return nil, st.err
	}
	if st.resp == nil {
		return nil, fmt.Errorf("adopt sandbox %q: its status was not read", sb.GetId())
	}
	p, err := pod.FromSandboxStatus(st.resp.GetStatus(), st.resp.GetInfo(), l.cfg.Rules)
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
