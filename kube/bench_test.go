package kube

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// BenchmarkPodViews is what one pass of the sync loop costs the API side
// with 1000 pods bound to the node: "derive" is each pod's view derived
// at the lookup (APIOf, as before), "cached" the lookup of the view the
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
				_ = APIOf(p)
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
