package controller

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// conditionState is how the controller reads a Node's condition.
type conditionState int

const (
	// conditionAbsent: the Node has no CriGuardMemoryPressure condition
	// (no cri-guard on it, or one without an API connection).
	conditionAbsent conditionState = iota
	// conditionTrue: cri-guard reports memory pressure, with a fresh
	// heartbeat.
	conditionTrue
	// conditionFalse: cri-guard reports no memory pressure.
	conditionFalse
	// conditionUnknown: the condition says Unknown (or a status the
	// controller does not know).
	conditionUnknown
	// conditionStale: the condition's heartbeat is older than StaleAfter
	// (or missing): whatever it says, it counts as Unknown.
	conditionStale
)

// String is the state's label in logs and metrics.
func (s conditionState) String() string {
	switch s {
	case conditionTrue:
		return "true"
	case conditionFalse:
		return "false"
	case conditionUnknown:
		return "unknown"
	case conditionStale:
		return "stale"
	default:
		return "absent"
	}
}

// decision is what the controller wants of one Node's taint.
type decision struct {
	State conditionState
	// Taint: the Node should carry the taint.
	Taint bool
	// Since is when the wanted state began, the start of the
	// condition→taint latency: the condition's lastTransitionTime, or the
	// moment it went stale; zero when not known (absent).
	Since time.Time
	// RecheckAfter, when positive, is when the decision changes by itself
	// (a True condition goes stale): the Node is looked at again then.
	RecheckAfter time.Duration
}

// decide reads node's condition at now: a True condition whose heartbeat
// is at most staleAfter old taints the node; anything else does not.
func decide(node *corev1.Node, now time.Time, staleAfter time.Duration) decision {
	i := slices.IndexFunc(node.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == conditionType })
	if i < 0 {
		return decision{State: conditionAbsent}
	}
	c := node.Status.Conditions[i]
	staleAt := c.LastHeartbeatTime.Add(staleAfter)
	if c.LastHeartbeatTime.IsZero() || !now.Before(staleAt) {
		since := staleAt
		if c.LastHeartbeatTime.IsZero() {
			since = transitionTime(c.LastTransitionTime)
		}
		return decision{State: conditionStale, Since: since}
	}
	switch c.Status {
	case corev1.ConditionTrue:
		return decision{State: conditionTrue, Taint: true, Since: transitionTime(c.LastTransitionTime),
			RecheckAfter: staleAt.Sub(now)}
	case corev1.ConditionFalse:
		return decision{State: conditionFalse, Since: transitionTime(c.LastTransitionTime)}
	default:
		return decision{State: conditionUnknown, Since: transitionTime(c.LastTransitionTime)}
	}
}

func transitionTime(t metav1.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.Time
}

// taintChange is what a reconciliation does to the taint.
type taintChange int

const (
	// taintUnchanged: the Node already is as wanted.
	taintUnchanged taintChange = iota
	// taintAdded: the taint is put on.
	taintAdded
	// taintRemoved: the taint is taken off.
	taintRemoved
	// taintReplaced: the taint stays, with the configured effect and no
	// value, in place of what was there (a changed --effect, or a taint
	// the node set itself).
	taintReplaced
)

// String is the change's label in logs.
func (c taintChange) String() string {
	switch c {
	case taintAdded:
		return "added"
	case taintRemoved:
		return "removed"
	case taintReplaced:
		return "replaced"
	default:
		return "unchanged"
	}
}

// taints returns the Node's taints as wanted: every taint of another key
// exactly as it is and in its place, and TaintKey once with effect when
// want, not at all otherwise. now is the taint's TimeAdded when it is added
// with NoExecute (the taint manager counts tolerationSeconds from it).
func taints(current []corev1.Taint, want bool, effect corev1.TaintEffect, now time.Time) ([]corev1.Taint, taintChange) {
	var ours []corev1.Taint
	out := make([]corev1.Taint, 0, len(current)+1)
	at := -1 // where ours was
	for _, t := range current {
		if t.Key == TaintKey {
			if at < 0 {
				at = len(out)
			}
			ours = append(ours, t)
			continue
		}
		out = append(out, t)
	}
	if !want {
		if len(ours) == 0 {
			return current, taintUnchanged
		}
		return out, taintRemoved
	}
	if len(ours) == 1 && ours[0].Effect == effect && ours[0].Value == "" {
		return current, taintUnchanged
	}
	t := corev1.Taint{Key: TaintKey, Effect: effect}
	for _, o := range ours {
		if o.Effect == effect && o.Value == "" {
			t = o // keep its TimeAdded
		}
	}
	if effect == corev1.TaintEffectNoExecute && t.TimeAdded == nil {
		ts := metav1.NewTime(now)
		t.TimeAdded = &ts
	}
	if at < 0 {
		return append(out, t), taintAdded
	}
	return slices.Insert(out, at, t), taintReplaced
}
