package kube

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// BenchmarkPodViews is what one pass of the sync loop costs the API side
// with 1000 pods bound to the node: "derive" is each pod's view derived
// at the lookup (apiOf, as before), "cached" the lookup of the view the
// informer derived once per change (Client.Pod).
func BenchmarkPodViews(b *testing.B) {
	const n = 1000
	pods := make([]*corev1.Pod, n)
	c := &Client{views: map[string]podView{}}
	for i := range pods {
		p := apiPod(fmt.Sprintf("p%d", i), fmt.Sprintf("uid-%d", i))
		p.Spec.Containers = []corev1.Container{
			{Name: "a", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("100Mi")}}},
			{Name: "b"},
		}
		p.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}
		pods[i] = p
		c.setView(nil, p)
	}
	b.Run("derive", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, p := range pods {
				_ = apiOf(p)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, p := range pods {
				_, _ = c.Pod(string(p.UID))
			}
		}
	})
}

// BenchmarkInformerUpdate is the API side's cost of one pod change the
// informer delivers (its view derived again, its report looked at), with
// 1000 pods bound to the node, a tenth of them reported.
func BenchmarkInformerUpdate(b *testing.B) {
	const n = 1000
	c := &Client{views: map[string]podView{}, reports: map[string]*report{}, now: time.Now, log: newLogEntry(nil), wake: make(chan struct{}, 1)}
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		p := apiPod(fmt.Sprintf("p%d", i), fmt.Sprintf("uid-%d", i))
		p.ResourceVersion = strconv.Itoa(i + 1)
		pods[i] = p
		c.setView(nil, p)
		if i%10 == 0 {
			r := &report{kind: kindEvict, uid: string(p.UID), reason: "Evicted", message: "m. ", patched: true}
			p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, r.reason, r.message
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget,
				Status: corev1.ConditionTrue, Reason: corev1.PodReasonTerminationByKubelet, Message: r.message})
			c.reports[r.uid] = r
		}
	}
	next := make([]*corev1.Pod, n) // each pod's next version
	for i, p := range pods {
		next[i] = p.DeepCopy()
		next[i].ResourceVersion = strconv.Itoa(n + i + 1)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		old, p := pods[i%n], next[i%n]
		if (i/n)%2 == 1 {
			old, p = p, old
		}
		c.setView(old, p)
		c.watched(p)
		i++
	}
}
