package controller

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func nodeWith(conds ...corev1.NodeCondition) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Conditions: conds}}
}

func cond(status corev1.ConditionStatus, heartbeat, transition time.Time) corev1.NodeCondition {
	return corev1.NodeCondition{Type: conditionType, Status: status,
		LastHeartbeatTime: metav1.NewTime(heartbeat), LastTransitionTime: metav1.NewTime(transition)}
}

func TestDecide(t *testing.T) {
	const stale = 15 * time.Minute
	kubelet := corev1.NodeCondition{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue,
		LastHeartbeatTime: metav1.NewTime(t0)}
	tests := []struct {
		name string
		node *corev1.Node
		want decision
	}{
		{name: "absent", node: nodeWith(kubelet), want: decision{State: conditionAbsent}},
		{name: "true and fresh", node: nodeWith(kubelet, cond(corev1.ConditionTrue, t0.Add(-time.Minute), t0.Add(-time.Hour))),
			want: decision{State: conditionTrue, Taint: true, Since: t0.Add(-time.Hour), RecheckAfter: 14 * time.Minute}},
		{name: "false", node: nodeWith(cond(corev1.ConditionFalse, t0, t0.Add(-time.Second))),
			want: decision{State: conditionFalse, Since: t0.Add(-time.Second)}},
		{name: "unknown", node: nodeWith(cond(corev1.ConditionUnknown, t0, t0)),
			want: decision{State: conditionUnknown, Since: t0}},
		{name: "true, heartbeat just stale", node: nodeWith(cond(corev1.ConditionTrue, t0.Add(-stale), t0.Add(-time.Hour))),
			want: decision{State: conditionStale, Since: t0}},
		{name: "true, heartbeat long stale", node: nodeWith(cond(corev1.ConditionTrue, t0.Add(-time.Hour), t0.Add(-2*time.Hour))),
			want: decision{State: conditionStale, Since: t0.Add(-time.Hour + stale)}},
		{name: "true, no heartbeat", node: nodeWith(corev1.NodeCondition{Type: conditionType, Status: corev1.ConditionTrue,
			LastTransitionTime: metav1.NewTime(t0.Add(-time.Minute))}),
			want: decision{State: conditionStale, Since: t0.Add(-time.Minute)}},
		{name: "true, heartbeat ahead of this clock", node: nodeWith(cond(corev1.ConditionTrue, t0.Add(time.Minute), t0)),
			want: decision{State: conditionTrue, Taint: true, Since: t0, RecheckAfter: 16 * time.Minute}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decide(tt.node, t0, stale)
			if !got.Since.Equal(tt.want.Since) || got.State != tt.want.State || got.Taint != tt.want.Taint ||
				got.RecheckAfter != tt.want.RecheckAfter {
				t.Errorf("Decide = %+v (state %v), want %+v (state %v)", got, got.State, tt.want, tt.want.State)
			}
		})
	}
}

func TestTaints(t *testing.T) {
	other1 := corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}
	other2 := corev1.Taint{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoExecute, TimeAdded: &metav1.Time{Time: t0.Add(-time.Hour)}}
	ours := corev1.Taint{Key: TaintKey, Effect: corev1.TaintEffectNoSchedule}
	oursPrefer := corev1.Taint{Key: TaintKey, Effect: corev1.TaintEffectPreferNoSchedule}
	oursExec := corev1.Taint{Key: TaintKey, Effect: corev1.TaintEffectNoExecute, TimeAdded: &metav1.Time{Time: t0}}
	tests := []struct {
		name    string
		current []corev1.Taint
		want    bool
		effect  corev1.TaintEffect
		taints  []corev1.Taint
		change  taintChange
	}{
		{name: "add to none", want: true, effect: corev1.TaintEffectNoSchedule, taints: []corev1.Taint{ours}, change: taintAdded},
		{name: "add after others", current: []corev1.Taint{other1, other2}, want: true, effect: corev1.TaintEffectNoSchedule,
			taints: []corev1.Taint{other1, other2, ours}, change: taintAdded},
		{name: "already there", current: []corev1.Taint{other1, ours, other2}, want: true, effect: corev1.TaintEffectNoSchedule,
			taints: []corev1.Taint{other1, ours, other2}, change: taintUnchanged},
		{name: "remove, others kept in place", current: []corev1.Taint{other1, ours, other2}, effect: corev1.TaintEffectNoSchedule,
			taints: []corev1.Taint{other1, other2}, change: taintRemoved},
		{name: "remove every effect of ours", current: []corev1.Taint{ours, other1, oursPrefer}, effect: corev1.TaintEffectNoSchedule,
			taints: []corev1.Taint{other1}, change: taintRemoved},
		{name: "nothing to remove", current: []corev1.Taint{other1}, effect: corev1.TaintEffectNoSchedule,
			taints: []corev1.Taint{other1}, change: taintUnchanged},
		{name: "other effect replaced in place", current: []corev1.Taint{other1, oursPrefer, other2}, want: true,
			effect: corev1.TaintEffectNoSchedule, taints: []corev1.Taint{other1, ours, other2}, change: taintReplaced},
		{name: "two of ours become one", current: []corev1.Taint{oursPrefer, other1, ours}, want: true,
			effect: corev1.TaintEffectNoSchedule, taints: []corev1.Taint{ours, other1}, change: taintReplaced},
		{name: "NoExecute gets its time", current: []corev1.Taint{other1}, want: true, effect: corev1.TaintEffectNoExecute,
			taints: []corev1.Taint{other1, oursExec}, change: taintAdded},
		{name: "a value of ours is cleared", current: []corev1.Taint{{Key: TaintKey, Value: "x", Effect: corev1.TaintEffectNoSchedule}},
			want: true, effect: corev1.TaintEffectNoSchedule, taints: []corev1.Taint{ours}, change: taintReplaced},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := append([]corev1.Taint(nil), tt.current...)
			got, change := taints(tt.current, tt.want, tt.effect, t0)
			if change != tt.change {
				t.Errorf("change = %v, want %v", change, tt.change)
			}
			if len(got) != len(tt.taints) {
				t.Fatalf("taints = %+v, want %+v", got, tt.taints)
			}
			for i := range got {
				if !got[i].MatchTaint(&tt.taints[i]) || got[i].Value != tt.taints[i].Value ||
					(got[i].TimeAdded == nil) != (tt.taints[i].TimeAdded == nil) ||
					(got[i].TimeAdded != nil && !got[i].TimeAdded.Equal(tt.taints[i].TimeAdded)) {
					t.Errorf("taint %d = %+v, want %+v", i, got[i], tt.taints[i])
				}
			}
			for i := range before {
				if before[i].Key != tt.current[i].Key || before[i].Effect != tt.current[i].Effect {
					t.Errorf("the node's taints were changed in place: %+v, was %+v", tt.current, before)
				}
			}
		})
	}
}
