package guard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/evictor"
	"github.com/cri-guard/cri-guard/internal/pod"
)

// evictions are the loop's state of the evictions it carries out (loop
// goroutine): what the evictor's next Pass is told of them.
type evictions struct {
	refused     []*evictor.Eviction // restored pods refused at start-up, to evict first
	inflight    []*inFlight         // the evictions whose stop is under way
	lastEvicted time.Time           // when the last eviction's stop returned
	bound       rateBound           // evictions started, against evictionBurst and evictionRefill
	passErr     string              // the error of the last eviction pass, if it failed
	lastFailed  bool                // the last eviction's stop failed: the next quick pass waits evictor.EvictionSpacing
}

// inFlight is an eviction whose stop is under way (loop goroutine).
type inFlight struct {
	e         *evictor.Eviction
	sandboxID string // the victim's sandbox
	graceCut  bool   // its grace period was cut short (cutGraceOf)
	// killedAt is when the victim's containers were all stopped (their
	// memory is uncharged then; the sandbox's stop goes on); zero before.
	killedAt time.Time
	// wsAtStart is the victim's working set when the eviction started
	// (-1: not known).
	wsAtStart int64
}

// evict is one eviction, start to end, as the owner runs it: the evictor
// chose e (or restore queued a refused restored pod); the stop runs off
// the loop (a grace period may take seconds, and admissions go on
// meanwhile), bounded by the grace period plus StopTimeout; its outcome
// comes back to the loop, which records it (settleEviction). Until then no
// other pod is chosen, as the kubelet waits for its victim's cleanup; but
// once the victim's containers are gone (their memory is free) a fresh
// sample that still meets a memory threshold chooses the next at once
// (the evictor's overlap rule, fed by released): several runaways at a time must not wait on each other's
// sandbox teardown.
func (l *Loop) evict(e *evictor.Eviction) {
	cur, ok := l.pods[e.Pod.Key()]
	if !ok || cur.State != pod.StateReady {
		// not expected: the evictor ranks only the active pods handed in
		l.ev.EvictionFailed(e, fmt.Errorf("evict pod %q: not a ready sandbox of the sync loop", e.Pod.String()))
		return
	}
	l.evictions.bound.take(l.now())
	f := &inFlight{e: e, sandboxID: cur.SandboxID, wsAtStart: -1}
	if ws, ok := l.podWorkingSet(cur); ok {
		f.wsAtStart = ws
	}
	l.evictions.inflight = append(l.evictions.inflight, f)
	victim := cur.Clone()
	killed := func() { l.post(func() { f.killedAt = l.now() }) }
	go func() {
		extra, err := l.stop(e, victim, killed)
		l.post(func() {
			if err == nil {
				e.Message += extra
			}
			l.settleEviction(e, victim.SandboxID, err)
		})
	}()
}

// stop stops an eviction's victim as the kubelet's killPod does through
// the runtime: every container with the grace period the eviction gives
// it, then the sandbox; the containers' listing is bounded by StopTimeout,
// the stops by the grace period plus StopTimeout. It returns the kubelet's
// sentences for the containers over their request, from their stats
// before the stop. A sandbox or container that is already gone counts as
// stopped (the runtime client answers NotFound with nil). killed is called
// once every container stopped, before the sandbox's stop.
func (l *Loop) stop(e *evictor.Eviction, victim *pod.Pod, killed func()) (extra string, err error) {
	lctx, cancel := context.WithTimeout(context.Background(), l.cfg.StopTimeout)
	defer cancel()
	extra = l.containerMessage(lctx, victim)
	ctrs, err := l.rt.ListContainers(lctx, &runtimeapi.ContainerFilter{PodSandboxId: victim.SandboxID})
	if err != nil {
		return "", fmt.Errorf("stop pod %q: %w", victim.String(), err)
	}
	grace := max(podGrace(e, victim, ctrs), minimumStopGrace)
	ctx, cancel := context.WithTimeout(context.Background(), grace+l.cfg.StopTimeout)
	defer cancel()
	err = l.killContainers(ctx, ctrs, grace)
	if err == nil && killed != nil {
		killed()
	}
	if serr := l.rt.StopPodSandbox(ctx, victim.SandboxID); serr != nil {
		err = errors.Join(err, serr)
	}
	if err != nil {
		return "", fmt.Errorf("stop pod %q: %w", victim.String(), err)
	}
	return extra, nil
}

// killContainers stops the running containers of ctrs, each with grace
// (whole seconds; 0 kills at once): the one container stop of an eviction
// and of its grace cut.
func (l *Loop) killContainers(ctx context.Context, ctrs []*runtimeapi.Container, grace time.Duration) error {
	var errs []error
	for _, c := range ctrs {
		if c.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		if err := l.rt.StopContainer(ctx, c.GetId(), int64(grace/time.Second)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// podGrace is the grace period e gives the victim's containers, against
// the pod's terminationGracePeriodSeconds as the API says it, else as the
// kubelet annotated its containers.
func podGrace(e *evictor.Eviction, victim *pod.Pod, ctrs []*runtimeapi.Container) time.Duration {
	if victim.HasTerminationGracePeriod {
		return e.PodGrace(victim.TerminationGracePeriod, true)
	}
	tgps, known := terminationGracePeriod(ctrs)
	return e.PodGrace(tgps, known)
}

// inFlightNow is the evictions under way as the evictor decides on them
// (loop goroutine): whether each victim released its memory is read now,
// one file each at most.
func (l *Loop) inFlightNow() []evictor.InFlight {
	if len(l.evictions.inflight) == 0 {
		return nil
	}
	out := make([]evictor.InFlight, len(l.evictions.inflight))
	for i, f := range l.evictions.inflight {
		out[i] = evictor.InFlight{Eviction: f.e, SandboxID: f.sandboxID, GraceCut: f.graceCut, Released: l.released(f)}
	}
	return out
}

// inFlightOf is e's eviction under way, nil when it is not (loop
// goroutine).
func (l *Loop) inFlightOf(e *evictor.Eviction) *inFlight {
	for _, f := range l.evictions.inflight {
		if f.e == e {
			return f
		}
	}
	return nil
}

// cutGraceOf kills f's victim at once, its grace period cut short (the
// evictor decided it, the node being a moment from OOM, and recorded it;
// why is what it observed): its pod cgroup's processes with SIGKILL from
// here, past the runtime (killPod: the kernel kills in microseconds, where
// containerd took 167 ms from StopContainer to a dead process on the
// race's host, time in which several runaways use the last of the
// memory), then through the runtime with no grace period, which also
// covers a host where the direct kill cannot act. The eviction's own stop
// returns once the containers are gone and stops the sandbox as usual. f
// nil (the eviction is not under way: not expected) cuts nothing.
func (l *Loop) cutGraceOf(f *inFlight, why string) {
	if f == nil {
		return
	}
	f.graceCut = true
	id, fields := f.sandboxID, podFields(f.e.Pod)
	if n, err := l.killPod(f.e.Pod); err != nil {
		l.log.WithFields(fields).WithError(err).Info("cannot kill the evicted pod's processes directly: the runtime kills them")
	} else {
		l.log.WithFields(fields).WithField("processes", n).Info("killed the evicted pod's processes (SIGKILL to its cgroup)")
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.StopTimeout)
		defer cancel()
		ctrs, err := l.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: id})
		if err == nil {
			err = l.killContainers(ctx, ctrs, 0)
		}
		if err != nil {
			l.log.WithFields(fields).WithError(err).Warn("kill of the evicted pod's containers failed; its stop goes on")
		}
	}()
}

// released reports whether f's victim has released its memory: its
// containers were reported stopped, or its pod cgroup's working set fell
// under an eighth of what it was when the eviction started (its processes
// are gone: a kill lands within milliseconds), or cannot be read any more
// (the cgroup is gone) though it could then. One file read.
func (l *Loop) released(f *inFlight) bool {
	if !f.killedAt.IsZero() {
		return true
	}
	if f.wsAtStart < 0 {
		return false
	}
	ws, ok := l.podWorkingSet(f.e.Pod)
	return !ok || ws <= f.wsAtStart/8
}

// podWorkingSet reads p's working set now (its pod cgroup, one file): an
// eviction's victim releasing its memory. ok is false when it cannot be
// read (no reader, no stats, or the cgroup is gone).
func (l *Loop) podWorkingSet(p *pod.Pod) (ws int64, ok bool) {
	if l.stats == nil {
		return 0, false
	}
	st, err := l.stats.Pod(p.CgroupParent)
	if err != nil || !st.HasMemory {
		return 0, false
	}
	return st.WorkingSetBytes, true
}

// killPod kills p's processes at once, past the runtime (a grace cut: the
// node is a moment from OOM); it returns how many processes were
// signalled (-1: the kernel's cgroup.kill, which does not say). Only the
// pod's own cgroup is signalled (pod.IsOwnCgroup: named after its UID, as
// the kubelet names it), never a QoS tier or another pod's group, whatever
// the sandbox's config said; the killer then refuses anything outside the
// pods cgroup.
func (l *Loop) killPod(p *pod.Pod) (int, error) {
	if l.kill == nil {
		return 0, errors.New("kill pod: no killer past the runtime")
	}
	if !pod.IsOwnCgroup(p.CgroupParent, p.UID) {
		return 0, fmt.Errorf("kill pod %s: its cgroup parent %q is not the kubelet's cgroup of this pod (pod<uid>): only the runtime stops it", p, p.CgroupParent)
	}
	return l.kill.KillPod(p.CgroupParent)
}

// settleEviction records an eviction's outcome (loop goroutine). Only a
// stop that happened counts: the evictor records it (metrics, re-admission
// guard) and the pod's current record, if it still has one, is marked
// stopped with EvictedAt. A failed or timed-out stop changes nothing but
// the failure count: the pod stays ready and is ranked again next pass.
func (l *Loop) settleEviction(e *evictor.Eviction, sandboxID string, err error) {
	l.evictions.inflight = slices.DeleteFunc(l.evictions.inflight, func(f *inFlight) bool { return f.sandboxID == sandboxID })
	l.evictions.lastEvicted, l.evictions.lastFailed = l.now(), err != nil
	if err != nil {
		l.ev.EvictionFailed(e, err)
		return
	}
	l.ev.Evicted(e)
	p, ok := l.pods[e.Pod.Key()]
	if !ok || p.SandboxID != sandboxID {
		// removed meanwhile (RemovePodSandbox, or gone from the runtime):
		// nothing to record, and no record comes back
		l.log.WithFields(podFields(e.Pod)).Info("pod evicted; its sandbox is already removed")
		if l.report != nil {
			l.report.Evicted(e.Pod, e.Message)
		}
		return
	}
	p.State = pod.StateStopped
	p.EvictedAt = l.now()
	l.recorded(p, false) // the guard is in the evictor's memory until it is written
	l.log.WithFields(podFields(p)).Info("pod evicted")
	if l.report != nil {
		l.report.Evicted(p, e.Message)
	}
}

// nextRefused returns the first restored pod refused at start-up that is
// still a ready sandbox of the loop, and forgets those before it that are
// not (evicted, stopped or removed meanwhile) (loop goroutine). A failed
// stop leaves the pod first: it is tried again.
func (l *Loop) nextRefused() *evictor.Eviction {
	for len(l.evictions.refused) > 0 {
		e := l.evictions.refused[0]
		if p, ok := l.pods[e.Pod.Key()]; ok && p.State == pod.StateReady && p.SandboxID == e.Pod.SandboxID {
			return e
		}
		l.evictions.refused = l.evictions.refused[1:]
	}
	return nil
}

// armRefused sets t for the pass that evicts the next restored pod
// refused at start-up: evictor.EvictionSpacing after the last eviction settled;
// stopped while an eviction is under way or none is queued (loop
// goroutine).
func (l *Loop) armRefused(t *time.Timer) {
	t.Stop()
	if len(l.evictions.inflight) == 0 && l.nextRefused() != nil {
		t.Reset(max(0, evictor.EvictionSpacing-l.now().Sub(l.evictions.lastEvicted)))
	}
}

// post runs f on the loop goroutine without waiting for it; it gives up
// when the loop has stopped.
func (l *Loop) post(f func()) {
	select {
	case l.updates <- f:
	case <-l.done:
	}
}

// containerMessage is the kubelet's sentences for the pod's containers that
// use more memory than they request (evictor.ContainerMessage), from the
// runtime's container stats. Requests come from the API; without it only a
// BestEffort pod's are known (none). Empty when stats cannot be read: the
// message is then the node's alone (logged at debug).
func (l *Loop) containerMessage(ctx context.Context, p *pod.Pod) string {
	if !p.FromAPI && p.QOS != pod.BestEffort {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	stats, err := l.rt.ListContainerStats(ctx, &runtimeapi.ContainerStatsFilter{PodSandboxId: p.SandboxID})
	if err != nil {
		l.log.WithError(err).WithFields(podFields(p)).Debug("no container stats for the eviction message")
		return ""
	}
	usage := map[string]int64{}
	var names []string
	for _, s := range stats {
		name := s.GetAttributes().GetMetadata().GetName()
		if ws := s.GetMemory().GetWorkingSetBytes(); ws != nil && name != "" {
			if _, dup := usage[name]; !dup {
				names = append(names, name)
			}
			usage[name] = int64(ws.GetValue())
		}
	}
	var cs []evictor.ContainerMemory
	if p.FromAPI {
		for _, c := range p.Containers { // spec order
			if u, ok := usage[c.Name]; ok {
				q := c.MemoryRequest
				cs = append(cs, evictor.ContainerMemory{Name: c.Name, WorkingSetBytes: u, Request: &q})
			}
		}
	} else {
		slices.Sort(names)
		var zero resource.Quantity // BestEffort: no container requests memory
		for _, n := range names {
			cs = append(cs, evictor.ContainerMemory{Name: n, WorkingSetBytes: usage[n], Request: &zero})
		}
	}
	return evictor.ContainerMessage(cs)
}

// minimumStopGrace is the least time an evicted pod's container is given
// to stop (a grace cut aside): the
// kubelet's killContainer raises any grace period, an eviction's override
// included, to minimumGracePeriodInSeconds
// (pkg/kubelet/kuberuntime/kuberuntime_container.go).
const minimumStopGrace = 2 * time.Second

// terminationGracePeriod is the pod's terminationGracePeriodSeconds as the
// kubelet annotated its containers; known is false when none carries it.
func terminationGracePeriod(ctrs []*runtimeapi.Container) (d time.Duration, known bool) {
	for _, c := range ctrs {
		if d, ok := pod.TerminationGracePeriod(c.GetAnnotations()); ok {
			return d, true
		}
	}
	return 0, false
}
