package evictor

import (
	"fmt"
	"slices"
	"time"

	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/pressure"
)

// Kind says what a decision was.
type Kind string

// Decision kinds.
const (
	KindAdmit       Kind = "admit"
	KindRefuse      Kind = "refuse"
	KindEvict       Kind = "evict"
	KindDryRun      Kind = "dry-run-evict"
	KindEvictFailed Kind = "evict-failed"
	// KindGraceCut: the eviction under way had its grace period cut short,
	// a memory signal being under half of a hard threshold.
	KindGraceCut   Kind = "grace-cut"
	KindUnable     Kind = "unable-to-evict"
	KindStatsError Kind = "stats-error"
)

// PodRef names a pod in a decision.
type PodRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	Attempt   uint32 `json:"attempt"`
	QOS       string `json:"qos"`
	Critical  bool   `json:"critical"`
}

func podRef(p *pod.Pod) *PodRef {
	return &PodRef{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Attempt: p.Attempt, QOS: string(p.QOS), Critical: p.Critical}
}

// Decision is one admission or eviction decision, kept for status and metrics.
type Decision struct {
	Time     time.Time `json:"time"`
	Kind     Kind      `json:"kind"`
	Pod      *PodRef   `json:"pod,omitempty"`
	Restored bool      `json:"restored,omitempty"`
	Signal   string    `json:"signal,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	Message  string    `json:"message,omitempty"`
	// Wakeup is what woke the pass that chose an eviction
	// (Wakeup.String: "fast-poll (armed by watch)").
	Wakeup string `json:"wakeup,omitempty"`
}

// maxDecisions is how many recent decisions Status keeps.
const maxDecisions = 50

// Status is a snapshot of the manager for `cri-guard status`.
type Status struct {
	// SampledAt is when the last good sample was taken; with StatsError
	// set, Observed is that sample's, stale.
	SampledAt  time.Time `json:"sampledAt"`
	Source     string    `json:"source,omitempty"`
	StatsError string    `json:"statsError,omitempty"`
	// SignalErrors say why signals are missing from the last sample (a
	// broken PSI file, an unreadable pods cgroup) and name the thresholds'
	// signals it lacks, error or not (a PSI file gone).
	SignalErrors []string                                 `json:"signalErrors,omitempty"`
	Observed     map[pressure.Signal]pressure.Observation `json:"observed,omitempty"`
	// HugePagesBytes is the node's huge page pool in that sample;
	// HugePagesSubtracted says memory.available had it taken off.
	HugePagesBytes      int64 `json:"hugePagesBytes,omitempty"`
	HugePagesSubtracted bool  `json:"hugePagesSubtracted,omitempty"`
	// Thresholds are the thresholds in force, as the last evaluation saw
	// them (before the first pass: unobserved).
	Thresholds []pressure.ThresholdState `json:"-"`
	Met        []string                  `json:"met,omitempty"`
	Conditions []string                  `json:"conditions"`
	Ranked     []RankedPod               `json:"ranked,omitempty"`
	Evicted    []string                  `json:"evicted,omitempty"`
	Decisions  []Decision                `json:"decisions"`
}

// RankedPod is a candidate as the last pass ranked it.
type RankedPod struct {
	PodRef
	Candidate
}

// Snapshot returns a copy of the latest status; safe from any goroutine.
func (m *Manager) Snapshot() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.snap // publish replaces slices and maps, never mutates them
	s.Decisions = slices.Clone(s.Decisions)
	return s
}

// publish refreshes the snapshot after an observation; ranked may be nil
// (then the last ranking is kept).
func (m *Manager) publish(ranked []Candidate) {
	m.mu.Lock()
	m.publishLocked(ranked)
	p, changed := m.pressureChanged()
	m.mu.Unlock()
	if changed {
		m.onPress(p)
	}
}

// pressureChanged returns the view of memory pressure of the snapshot, and
// whether onPress is to be told of it (it changed since it was last told).
// Nothing is told before the first good sample (m.mu held).
func (m *Manager) pressureChanged() (Pressure, bool) {
	if m.onPress == nil || m.snap.SampledAt.IsZero() {
		return Pressure{}, false
	}
	p := Pressure{MemoryPressure: slices.Contains(m.snap.Conditions, pressure.ConditionMemoryPressure)}
	if p.MemoryPressure {
		for _, t := range m.snap.Thresholds {
			if t.Acting || t.Pending {
				p.Thresholds = append(p.Thresholds, t.Threshold.String())
			}
		}
	}
	if m.told != nil && m.told.MemoryPressure == p.MemoryPressure && slices.Equal(m.told.Thresholds, p.Thresholds) {
		return p, false
	}
	m.told = &p
	return p, true
}

// publishLocked refreshes the snapshot (m.mu held).
func (m *Manager) publishLocked(ranked []Candidate) {
	s := &m.snap
	s.SampledAt = m.lastSample
	s.Source = m.sample.Source
	s.StatsError = ""
	if m.statsErr != nil {
		s.StatsError = m.statsErr.Error()
	}
	s.Observed = m.observed
	s.HugePagesBytes, s.HugePagesSubtracted = m.sample.HugePagesBytes, m.sample.HugePagesSubtracted
	s.SignalErrors = nil
	for _, err := range []error{m.sample.PSIError, m.sample.PodsError, m.sample.HugePagesError} {
		if err != nil {
			s.SignalErrors = append(s.SignalErrors, err.Error())
		}
	}
	// a signal can be missing without an error (a PSI file gone reads as
	// PSI disabled): its thresholds cannot act, and status says so
	for _, sig := range m.missing {
		s.SignalErrors = append(s.SignalErrors, fmt.Sprintf("%s missing from the sample: its thresholds cannot act", sig))
	}
	s.Thresholds = m.result.States
	if len(s.Thresholds) != len(m.cfg.Thresholds) { // not evaluated yet, or stats unreadable
		s.Thresholds = make([]pressure.ThresholdState, len(m.cfg.Thresholds))
		for i, t := range m.cfg.Thresholds {
			s.Thresholds[i].Threshold = t
			s.Thresholds[i].Limit, s.Thresholds[i].LimitKnown = t.Limit(pressure.Observation{})
		}
	}
	s.Met = nil
	for _, mt := range m.result.Met {
		s.Met = append(s.Met, mt.String())
	}
	s.Conditions = slices.Clone(m.result.Conditions)
	if m.statsErr != nil {
		// what admission acts on now (the onStatsError policy), not the
		// last good evaluation
		conds, _ := m.conditions()
		s.Conditions = slices.Clone(conds)
	}
	if ranked != nil {
		s.Ranked = make([]RankedPod, 0, len(ranked))
		for _, c := range ranked {
			s.Ranked = append(s.Ranked, RankedPod{PodRef: *podRef(c.Pod), Candidate: c})
		}
	}
	s.Evicted = nil
	for _, e := range m.evicted {
		s.Evicted = append(s.Evicted, e.pod.String())
	}
}

// decide records a decision and tells the observer.
func (m *Manager) decide(d Decision) {
	m.mu.Lock()
	m.snap.Decisions = append(m.snap.Decisions, d)
	if n := len(m.snap.Decisions); n > maxDecisions {
		m.snap.Decisions = slices.Delete(m.snap.Decisions, 0, n-maxDecisions)
	}
	m.mu.Unlock()
	if m.obs != nil {
		m.obs.Decided(d)
	}
}
