package evictor

import (
	"fmt"
	"slices"
	"time"

	"github.com/cri-guard/cri-guard/internal/pod"
)

// One eviction pass: the sync loop hands in what it knows (the pods, the
// evictions under way, how long ago the last one settled, what woke the
// pass), Synchronize takes one sample and returns one Action, which the
// loop carries out. When the next eviction may start (spacing, overlap)
// and when a grace period is cut are decided here, beside the measures
// they read.

const (
	// EvictionSpacing is the least time between an eviction and the next
	// one started by a quick pass on a PSI threshold alone, and between
	// the evictions of the restored pods refused at start-up (the
	// housekeeping tick keeps its own cadence, as the kubelet's one
	// eviction per monitoring interval; a memory signal waits
	// MemoryEvictionSpacing).
	EvictionSpacing = time.Second
	// MemoryEvictionSpacing is the same on a memory signal. Short, as the
	// race measured a second runaway lost to the OOM killer waiting out
	// the second; not zero, so that pressure that evictions do not relieve
	// (memory held outside the pods, a dead victim's page cache not yet
	// reclaimed) evicts at most ten pods a second, each after a fresh
	// sample, not one per stop; none a moment from OOM (four runaways at
	// 2.5 GB/s together lost one to the OOM killer in the 100 ms).
	MemoryEvictionSpacing = 100 * time.Millisecond
	// maxInFlight bounds the evictions under way at once.
	maxInFlight = 8
)

// Pass is what one eviction pass decides on, besides the sample it takes.
type Pass struct {
	// Active are the ready pods, oldest first.
	Active []*pod.Pod
	// InFlight are the evictions whose stop is under way.
	InFlight []InFlight
	// Refused is the next restored pod refused at start-up still to be
	// evicted (EvictRestored); nil: none.
	Refused *Eviction
	// SinceSettled is how long ago the last eviction's stop returned
	// (long ago when none did); LastFailed says it failed.
	SinceSettled time.Duration
	LastFailed   bool
	// RateHeld says the loop's bound on evictions started holds the next
	// one back.
	RateHeld bool
	// Spaced says the pass is one of the quick ones (a trigger, a
	// notification, a follow-up, a fast poll), spaced after the last
	// eviction; the housekeeping tick and a manual pass are not.
	Spaced bool
	// Wakeup is what woke the pass: it goes with the eviction it chooses.
	Wakeup Wakeup
	// NearMargin is how close (bytes of a memory signal) to a threshold
	// counts as near (Action.Near).
	NearMargin int64
}

// InFlight is an eviction whose stop is under way.
type InFlight struct {
	Eviction *Eviction
	// SandboxID is the victim's sandbox when its eviction started.
	SandboxID string
	// GraceCut: its grace period was cut short already.
	GraceCut bool
	// Released: the victim released its memory (its containers were
	// reported stopped, or its pod cgroup's working set fell under an
	// eighth of what it was when the eviction started, or cannot be read
	// any more though it could then).
	Released bool
}

// Hold says why a pass chose no pod without ranking them, or that it
// ranked them.
type Hold int

// The holds, in the order a pass meets them.
const (
	// HoldNone: the pass ranked the pods (Action.Err says whether it
	// could).
	HoldNone Hold = iota
	// HoldInFlight: an eviction under way holds the next back (its victim
	// has not released its memory, no memory signal acts, or maxInFlight
	// are under way).
	HoldInFlight
	// HoldRate: Pass.RateHeld.
	HoldRate
	// HoldRefused: the restored pods refused at start-up come first;
	// Action.Evict is the next of them when EvictionSpacing has passed.
	HoldRefused
	// HoldSpacing: a quick pass too soon after the last eviction.
	HoldSpacing
)

// Action is what a pass decided; the loop carries it out in this order:
// the grace cuts of the evictions under way, then the eviction, then its
// own grace cut.
type Action struct {
	// Cut are evictions under way whose grace period is cut now (the node
	// is a moment from OOM: CutWhy says why): their victims are killed at
	// once.
	Cut    []*Eviction
	CutWhy string
	// Evict is the pod to stop now and with what grace; nil: none.
	Evict *Eviction
	// CutEvict says Evict's own grace period is cut at once too (a moment
	// from OOM already: no grace, not even a pass's wait).
	CutEvict bool
	// Hold says why no pod was ranked, if none was.
	Hold Hold
	// Err is why the pass could not choose (stats unreadable).
	Err error
	// Near says when to look again: soon (the loop's fast poll) when the
	// pass's sample meets a threshold or has a memory signal within
	// Pass.NearMargin of one (a moment from OOM always is); false: at the
	// loop's own pace.
	Near bool
}

// Synchronize is one pass of the eviction loop, as the kubelet's
// synchronize: sample once and evaluate the thresholds; cut the grace
// period of the evictions under way when the node is a moment from OOM;
// hold the next eviction back while one is under way (unless it may
// overlap), while the loop's rate bound holds, while restored pods refused
// at start-up are still to go, or when a quick pass comes too soon after
// the last; otherwise rank the active pods and, when a threshold acts,
// choose the best-ranked evictable one; and say whether to look again
// soon. It stops nothing: the caller
// carries the Action out and reports each eviction's outcome with Evicted
// or EvictionFailed. In dry run the choice is only logged and recorded.
func (m *Manager) Synchronize(p Pass) Action {
	m.observe()
	ev := m.Evaluation()
	a := Action{Near: ev.NearThreshold(p.NearMargin)}
	overlap := false
	if len(p.InFlight) > 0 {
		// one eviction at a time: the next waits until this one is done;
		// meanwhile admission gets current conditions (the sample), and
		// the grace period is cut short if the node is a moment from OOM
		a.Cut, a.CutWhy = m.graceCuts(p.InFlight, ev)
		if !mayOverlap(p.InFlight, ev) {
			return m.hold(a, HoldInFlight)
		}
		overlap = true
	}
	if p.RateHeld {
		// conditions and admission still follow the pressure
		return m.hold(a, HoldRate)
	}
	if p.Refused != nil && !overlap {
		// restored pods that admission refused at start-up come first (the
		// kubelet rejects them when it starts), EvictionSpacing apart
		if p.SinceSettled >= EvictionSpacing {
			a.Evict = p.Refused
		}
		return m.hold(a, HoldRefused)
	}
	if p.Spaced && p.SinceSettled < EvictionSpacing && !overlap && !spacedEnough(p, ev) {
		return m.hold(a, HoldSpacing)
	}
	active := p.Active
	if overlap {
		active = slices.DeleteFunc(slices.Clone(active), func(pd *pod.Pod) bool {
			return slices.ContainsFunc(p.InFlight, func(f InFlight) bool { return f.SandboxID == pd.SandboxID })
		})
	}
	a.Evict, a.Err = m.choose(active, p.Wakeup)
	if a.Evict != nil {
		if why, critical := ev.memoryCritical(); critical {
			a.CutEvict, a.CutWhy = true, why
			m.graceCut(a.Evict, why)
		}
	}
	return a
}

// hold ends a pass that ranks no pod: the snapshot shows its sample.
func (m *Manager) hold(a Action, h Hold) Action {
	m.publish(nil)
	a.Hold = h
	return a
}

// spacedEnough reports whether a quick pass within EvictionSpacing of the
// last eviction may start the next. The quick passes wait EvictionSpacing
// after the last settled, as a PSI average still holds the stall the
// victim caused; a memory signal met in a sample taken after the victim's
// stop returned (its processes are gone, their memory uncharged) is now,
// and waits only MemoryEvictionSpacing: a second runaway must not get a
// second to reach the OOM killer. A moment from OOM (memoryCritical: under
// half of a hard threshold, or falling faster than a stop through the
// runtime lands) waits no spacing at all: the last victim's stop returned
// (its memory is free), and the kernel's OOM killer, which would otherwise
// choose next, picks no better than the ranking. A failed stop waits the
// whole EvictionSpacing.
func spacedEnough(p Pass, ev Evaluation) bool {
	_, critical := ev.memoryCritical()
	return !p.LastFailed && (p.SinceSettled >= MemoryEvictionSpacing || critical) && ev.memoryThresholdMet()
}

// graceCuts returns the evictions under way whose grace period is cut now,
// and why: when a memory signal is a moment from OOM (memoryCritical),
// every one not cut yet (once per eviction; soft evictions included: the
// node is a moment from OOM either way). The kubelet gives a hard
// eviction 1 s (2 s per container at least): a runaway that ignores
// SIGTERM grows all that time, and at a few hundred MB/s the kernel's OOM
// killer ends the race first, killing whatever scores highest, a
// bystander as likely as the victim. Killing the victim already chosen is
// never worse. Each cut is recorded.
func (m *Manager) graceCuts(inflight []InFlight, ev Evaluation) (cut []*Eviction, why string) {
	why, critical := ev.memoryCritical()
	if !critical {
		return nil, ""
	}
	for _, f := range inflight {
		if !f.GraceCut {
			m.graceCut(f.Eviction, why)
			cut = append(cut, f.Eviction)
		}
	}
	return cut, why
}

// mayOverlap reports whether the next eviction may start while others are
// under way: fewer than maxInFlight are, every victim has released its
// memory, and this pass's sample (taken since) still meets a threshold on
// a memory signal. The kubelet waits for its victim's cleanup; here the
// teardown (hundreds of ms: containerd reports a container stopped after
// its own cleanup) would let a second and third runaway reach the OOM
// killer meanwhile, and the memory it waits for is already free.
func mayOverlap(inflight []InFlight, ev Evaluation) bool {
	if len(inflight) >= maxInFlight {
		return false
	}
	for _, f := range inflight {
		if !f.Released {
			return false
		}
	}
	return ev.memoryThresholdMet()
}

// choose ranks the active pods on the pass's evaluation and, when a
// threshold acts, chooses the best-ranked evictable pod (nil when nothing
// is to be stopped, and in dry run, where the choice is only logged and
// recorded). w, what woke the pass, is logged and recorded with the
// choice.
func (m *Manager) choose(active []*pod.Pod, w Wakeup) (*Eviction, error) {
	if m.statsErr != nil {
		m.publish(nil)
		return nil, fmt.Errorf("synchronize: %w", m.statsErr)
	}
	ranked := m.rank(active)
	m.publish(ranked)
	if len(m.result.Met) == 0 {
		m.unable = false
		return nil, nil
	}
	met := m.result.Met[0]
	now := m.now()
	if len(ranked) == 0 {
		// said once per episode: a pass every interval would flood the
		// log and push every other decision out of status
		if !m.unable {
			m.unable = true
			m.log.WithField("threshold", met.String()).Warn("unable to evict any pods from the node: no evictable pod")
			m.decide(Decision{Time: now, Kind: KindUnable, Signal: string(met.Threshold.Signal),
				Message: "unable to evict any pods from the node: every active pod is critical or none runs"})
		}
		return nil, nil
	}
	m.unable = false
	m.logCandidates(ranked, met)
	e := &Eviction{Pod: ranked[0].Pod, Grace: m.cfg.MaxPodGracePeriod, Hard: met.Threshold.Hard, Signal: met.Threshold.Signal, Message: evictionMessage(met), Wakeup: w}
	if e.Hard {
		e.Grace = m.cfg.HardGracePeriod
	}
	fields := evictionFields(e)
	fields["threshold"], fields["observed"] = met.Threshold.String(), met.Observed.String()
	if m.cfg.DryRun {
		m.log.WithFields(fields).Warn("dry run: would evict pod")
		m.decide(Decision{Time: now, Kind: KindDryRun, Pod: podRef(e.Pod), Signal: string(e.Signal), Reason: ReasonEvicted, Message: e.Message, Wakeup: w.String()})
		return nil, nil
	}
	m.log.WithFields(fields).Warn("evicting pod")
	return e, nil
}
