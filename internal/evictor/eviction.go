package evictor

import (
	"time"

	"github.com/sirupsen/logrus"

	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/pressure"
)

// Eviction: the decision to stop one pod and the outcomes the sync loop
// records of it.

// Eviction is Synchronize's decision to stop one pod (Action.Evict). The
// caller stops it (containers with Grace, then the sandbox) and reports
// the outcome with Evicted or EvictionFailed: only a stop that happened
// counts.
type Eviction struct {
	Pod *pod.Pod
	// Grace is the eviction manager's grace period override:
	// HardGracePeriod for a hard threshold, MaxPodGracePeriod for a soft
	// one (which the pod's own terminationGracePeriodSeconds lowers: see
	// PodGrace).
	Grace time.Duration
	// Hard is true when a hard threshold chose the pod.
	Hard bool
	// Signal is the signal of the threshold that chose the pod.
	Signal pressure.Signal
	// Message is the kubelet's eviction message.
	Message string
	// Restored is set for a restored pod that admission refused at
	// start-up (the kubelet's rejectPod on a restart): no override, it is
	// stopped with its own terminationGracePeriodSeconds, Grace when that
	// is not known.
	Restored bool
	// Wakeup is what woke the pass that chose the pod.
	Wakeup Wakeup
}

// Wakeup says what woke the sync loop's pass that chose an eviction
// (logged with it, in its decision): Source is the pass's cause (tick,
// trigger, notification, memory-events, follow-up, fast-poll), ArmedBy,
// for a fast-poll pass, what first found memory near a threshold and
// started the fast poll (watch: a watch sample).
type Wakeup struct {
	Source  string
	ArmedBy string
}

// String is "fast-poll (armed by watch)", "trigger", or "" when unknown.
func (w Wakeup) String() string {
	if w.ArmedBy != "" {
		return w.Source + " (armed by " + w.ArmedBy + ")"
	}
	return w.Source
}

// DefaultTerminationGracePeriod is the API's default
// terminationGracePeriodSeconds: the grace of a restored pod refused at
// start-up when neither the API nor its containers say its own.
const DefaultTerminationGracePeriod = 30 * time.Second

// EvictRestored is the eviction of a restored pod that Admit refused at
// start-up with r (restoredPods: enforce): the kubelet rejects such a pod
// when it restarts and kills it with its own terminationGracePeriodSeconds.
// The signal is that of the threshold that acts, if one does. Nil in dry
// run, where the choice is only logged and recorded.
func (m *Manager) EvictRestored(p *pod.Pod, r Result) *Eviction {
	e := &Eviction{Pod: p, Grace: DefaultTerminationGracePeriod, Message: r.Message, Restored: true}
	if len(m.result.Met) > 0 {
		e.Signal = m.result.Met[0].Threshold.Signal
	}
	if m.cfg.DryRun {
		m.log.WithFields(evictionFields(e)).Warn("dry run: would evict restored pod")
		m.decide(Decision{Time: m.now(), Kind: KindDryRun, Pod: podRef(p), Signal: string(e.Signal), Reason: ReasonEvicted, Message: e.Message, Restored: true})
		return nil
	}
	return e
}

// PodGrace is the grace period the pod is stopped with, given its
// terminationGracePeriodSeconds when the runtime knows it (known): for a
// soft threshold min(MaxPodGracePeriod, TGPS), as the kubelet's
// synchronize computes it (1.36 dropped the
// AllowOverwriteTerminationGracePeriodSeconds gate, off by default in 1.34:
// the same value); for a hard one HardGracePeriod; for a restored pod
// refused at start-up TGPS itself.
func (e *Eviction) PodGrace(tgps time.Duration, known bool) time.Duration {
	if e.Restored && known {
		return tgps
	}
	if !e.Hard && known && tgps < e.Grace {
		return tgps
	}
	return e.Grace
}

// Evicted records that e's pod was stopped (or its sandbox was already
// gone): it counts the eviction and refuses the pod's recreation while the
// pressure lasts.
func (m *Manager) Evicted(e *Eviction) {
	m.evicted[e.Pod.UID] = evictedPod{pod: e.Pod, message: e.Message, at: m.now()}
	m.decide(Decision{Time: m.now(), Kind: KindEvict, Pod: podRef(e.Pod), Signal: string(e.Signal), Reason: ReasonEvicted, Message: e.Message, Wakeup: e.Wakeup.String()})
	m.publish(nil)
}

// EvictionFailed records that stopping e's pod failed or timed out: it is
// counted and logged with the runtime's error, nothing else changes, and
// the pod stays a candidate for the next pass.
func (m *Manager) EvictionFailed(e *Eviction, err error) {
	m.log.WithFields(evictionFields(e)).WithError(err).Error("eviction failed: the pod stays a candidate")
	m.decide(Decision{Time: m.now(), Kind: KindEvictFailed, Pod: podRef(e.Pod), Signal: string(e.Signal), Message: err.Error()})
}

// graceCut records that Synchronize cut e's grace period short (the sync
// loop kills its pod at once) because of what Evaluation.MemoryCritical
// observed.
func (m *Manager) graceCut(e *Eviction, observed string) {
	m.log.WithFields(evictionFields(e)).WithField("observed", observed).Warn("memory critical during the eviction's grace period: killing the pod now")
	m.decide(Decision{Time: m.now(), Kind: KindGraceCut, Pod: podRef(e.Pod), Signal: string(e.Signal), Message: "grace period cut short: " + observed})
}

func evictionFields(e *Eviction) logrus.Fields {
	p := e.Pod
	f := logrus.Fields{"pod": p.Name, "namespace": p.Namespace, "pod_uid": p.UID,
		"pod_sandbox_id": p.SandboxID, "qos": p.QOS, "signal": e.Signal}
	if e.Wakeup.Source != "" {
		f["wakeup"] = e.Wakeup.Source
	}
	if e.Wakeup.ArmedBy != "" {
		f["armed_by"] = e.Wakeup.ArmedBy
	}
	return f
}

func (m *Manager) logCandidates(ranked []Candidate, met pressure.Met) {
	n := min(len(ranked), 5)
	for i, c := range ranked[:n] {
		m.log.WithFields(logrus.Fields{"rank": i + 1, "pod": c.Pod.Name, "namespace": c.Pod.Namespace,
			"qos": c.Pod.QOS, "priority": c.Pod.Priority, "has_stats": c.HasStats,
			"working_set": c.WorkingSet, "request": c.Request, "signal": met.Threshold.Signal}).Info("eviction candidate")
	}
}

// MarkEvicted restores the re-admission guard for a pod cri-guard evicted
// before a restart (its checkpoint says so): while memory pressure lasts,
// its recreation is refused. The first sample without pressure forgets it.
func (m *Manager) MarkEvicted(p *pod.Pod, at time.Time) {
	if _, ok := m.evicted[p.UID]; !ok {
		m.evicted[p.UID] = evictedPod{pod: p, at: at}
	}
}
