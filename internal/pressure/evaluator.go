package pressure

import (
	"fmt"
	"time"
)

// ConditionMemoryPressure is the node condition memory thresholds raise.
const ConditionMemoryPressure = "MemoryPressure"

// Met is a threshold that is met, with what was observed.
type Met struct {
	// Threshold is the threshold met.
	Threshold Threshold
	// Observed is the observation that met it.
	Observed Observation
	// Limit is the value compared with: bytes for memory signals (the
	// threshold, plus the minimum reclaim when ByMinReclaim), percent for
	// PSI signals.
	Limit float64
	// ByMinReclaim is true when the threshold itself is no longer crossed
	// but its minimum reclaim keeps it active.
	ByMinReclaim bool
	// Since is when the threshold was first observed met (continuously).
	Since time.Time
}

// String renders m like "memory.available 80Mi < 100Mi" or
// "memory.pressure.full.avg10 52% > 40%".
func (m Met) String() string {
	op, limit := "<", ""
	if m.Threshold.Operator == opGreaterThan {
		op, limit = ">", formatPercent(roundPercent(m.Limit))
	} else {
		limit = formatBytes(int64(m.Limit))
	}
	s := fmt.Sprintf("%s %s %s %s", m.Threshold.Signal, m.Observed, op, limit)
	if m.ByMinReclaim {
		s += " (threshold " + m.Threshold.Value.String() + " + min-reclaim " + m.Threshold.MinReclaim.String() + ")"
	}
	return s
}

// Result is the outcome of one evaluation.
type Result struct {
	// Met are the thresholds that act now: hard ones met, soft ones met for
	// their grace period, and previously acting ones kept by min-reclaim.
	Met []Met
	// Pending are soft thresholds met whose grace period has not elapsed.
	Pending []Met
	// Conditions holds ConditionMemoryPressure while any threshold is met
	// (acting or pending, as the kubelet reports it) and for the transition
	// period after the last time one was.
	Conditions []string
	// States holds every threshold's state at this evaluation, in the
	// order of the thresholds: what status and metrics show, so that they
	// never evaluate a threshold on their own.
	States []ThresholdState
}

// ThresholdState is one threshold as the last evaluation saw it.
type ThresholdState struct {
	Threshold Threshold
	// Observed is false when the signal was not in the sample.
	Observed bool
	// Limit is the threshold in the observation's unit (bytes, or percent
	// for PSI), minimum reclaim not included; LimitKnown is false when a
	// percentage has no capacity to resolve against.
	Limit      float64
	LimitKnown bool
	// Crossed: the observation is beyond the threshold itself.
	Crossed bool
	// Acting: the threshold acts (hard and met, soft and met past its
	// grace period, or kept by its minimum reclaim).
	Acting bool
	// Pending: a soft threshold met whose grace period has not elapsed.
	Pending bool
	// ByMinReclaim: acting only because the minimum reclaim is not reached.
	ByMinReclaim bool
	// Since is when it was first observed met (zero when not met).
	Since time.Time
}

// Evaluator applies thresholds over successive observations, keeping the
// state the kubelet's eviction manager keeps between synchronisations. It
// is not safe for concurrent use: one loop owns it.
type Evaluator struct {
	thresholds    []Threshold
	transition    time.Duration
	acting        []bool      // thresholds that acted at the last evaluation
	firstObserved []time.Time // zero when not met at the last evaluation
	lastMet       time.Time   // last time any threshold was met
}

// NewEvaluator returns an Evaluator for thresholds (from ParseThresholds)
// with the given pressure transition period.
func NewEvaluator(thresholds []Threshold, transition time.Duration) *Evaluator {
	return &Evaluator{
		thresholds:    append([]Threshold(nil), thresholds...),
		transition:    transition,
		acting:        make([]bool, len(thresholds)),
		firstObserved: make([]time.Time, len(thresholds)),
	}
}

// Update replaces the thresholds and the transition period (a reload),
// keeping what was observed: an unchanged threshold (same String, grace
// period and minimum reclaim included) keeps its first-observed time and
// whether it acted, and the node condition keeps the time a threshold was
// last met, so that a reload neither drops MemoryPressure within its
// transition period nor restarts a soft threshold's grace period. It
// returns the thresholds added and removed, rendered.
func (e *Evaluator) Update(thresholds []Threshold, transition time.Duration) (added, removed []string) {
	old := map[string]int{}
	for i, t := range e.thresholds {
		old[t.String()] = i
	}
	acting := make([]bool, len(thresholds))
	first := make([]time.Time, len(thresholds))
	kept := map[string]bool{}
	for i, t := range thresholds {
		if j, ok := old[t.String()]; ok {
			acting[i], first[i] = e.acting[j], e.firstObserved[j]
			kept[t.String()] = true
		} else {
			added = append(added, t.String())
		}
	}
	for _, t := range e.thresholds {
		if !kept[t.String()] {
			removed = append(removed, t.String())
		}
	}
	e.thresholds = append([]Threshold(nil), thresholds...)
	e.transition, e.acting, e.firstObserved = transition, acting, first
	return added, removed
}

// Thresholds returns the thresholds the Evaluator applies.
func (e *Evaluator) Thresholds() []Threshold {
	return append([]Threshold(nil), e.thresholds...)
}

// Evaluate applies the thresholds to obs at now, as the kubelet's
// synchronize does: thresholds met now (thresholdsMet), merged with those
// acting before that have not yet reclaimed their minimum (thresholdsMet
// with enforceMinReclaim, mergeThresholds); the first time each was met
// (thresholdsFirstObservedAt); the node condition, kept for the transition
// period (nodeConditionsObservedSince); and the ones whose grace period has
// elapsed (thresholdsMetGracePeriod). Signals absent from obs meet nothing.
func (e *Evaluator) Evaluate(now time.Time, obs map[Signal]Observation) Result {
	var res Result
	anyMet := false
	res.States = make([]ThresholdState, len(e.thresholds))
	for i, t := range e.thresholds {
		st := &res.States[i]
		st.Threshold = t
		o, found := obs[t.Signal]
		st.Limit, st.LimitKnown = t.Limit(o)
		if !found {
			e.acting[i], e.firstObserved[i] = false, time.Time{}
			continue
		}
		st.Observed = true
		m, met := thresholdMet(t, o, false)
		st.Crossed = met
		if !met && e.acting[i] && t.MinReclaim != nil {
			m, met = thresholdMet(t, o, true)
			m.ByMinReclaim = met
		}
		if !met {
			e.acting[i], e.firstObserved[i] = false, time.Time{}
			continue
		}
		anyMet = true
		if e.firstObserved[i].IsZero() {
			e.firstObserved[i] = now
		}
		m.Since = e.firstObserved[i]
		st.Since, st.ByMinReclaim = m.Since, m.ByMinReclaim
		if now.Sub(e.firstObserved[i]) >= t.GracePeriod {
			e.acting[i] = true
			st.Acting = true
			res.Met = append(res.Met, m)
		} else {
			e.acting[i] = false
			st.Pending = true
			res.Pending = append(res.Pending, m)
		}
	}
	if anyMet {
		e.lastMet = now
	}
	if anyMet || (!e.lastMet.IsZero() && now.Sub(e.lastMet) < e.transition) {
		res.Conditions = []string{ConditionMemoryPressure}
	}
	return res
}

// thresholdMet compares one observation with a threshold; with
// enforceMinReclaim the limit is moved by the minimum reclaim.
func thresholdMet(t Threshold, o Observation, enforceMinReclaim bool) (Met, bool) {
	m := Met{Threshold: t, Observed: o}
	if t.Operator == opGreaterThan {
		limit := t.Value.Percentage * 100
		if enforceMinReclaim && t.MinReclaim != nil {
			limit -= t.MinReclaim.Percentage * 100
		}
		m.Limit = limit
		return m, o.Percent > limit
	}
	limit := t.Value.Bytes(o.Capacity)
	if enforceMinReclaim && t.MinReclaim != nil {
		limit += t.MinReclaim.Bytes(o.Capacity)
	}
	m.Limit = float64(limit)
	return m, limit > o.Available
}
