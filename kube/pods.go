package kube

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"

	"github.com/cri-guard/cri-guard/pod"
)

// uidIndex indexes the pod cache by UID, the key CRI carries.
const uidIndex = "uid"

// newPodInformer watches the pods bound to node (the Node authorizer lets a
// node list and watch exactly these), indexed by UID.
func newPodInformer(c cache.Getter, node string) cache.SharedIndexInformer {
	lw := cache.NewListWatchFromClient(c, "pods", corev1.NamespaceAll, fields.OneTermEqualSelector("spec.nodeName", node))
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 10*time.Minute, cache.Indexers{
		uidIndex: func(obj any) ([]string, error) {
			if p, ok := obj.(*corev1.Pod); ok {
				return []string{string(p.UID)}, nil
			}
			return nil, nil
		},
	})
	// only what cri-guard reads is kept: the managed fields are the largest
	// part of a pod object and are never read
	_ = inf.SetTransform(func(obj any) (any, error) {
		if p, ok := obj.(*corev1.Pod); ok {
			p.ManagedFields = nil
		}
		return obj, nil
	})
	return inf
}

// byUID returns the cached pod with this UID.
func byUID(inf cache.SharedIndexInformer, uid string) (*corev1.Pod, bool) {
	objs, err := inf.GetIndexer().ByIndex(uidIndex, uid)
	if err != nil || len(objs) == 0 {
		return nil, false
	}
	p, ok := objs[0].(*corev1.Pod)
	return p, ok
}

// APIOf derives what cri-guard needs of an API pod, as the kubelet
// computes it: the memory request of GetResourceRequestQuantity
// (pkg/api/v1/resource: PodRequests without overhead, then the overhead
// when the request is not zero), the memory-pressure toleration of the
// eviction manager's Admit (TolerationsTolerateTaint with
// node.kubernetes.io/memory-pressure:NoSchedule), mirror pods by their
// annotation.
func APIOf(p *corev1.Pod) pod.API {
	a := pod.API{Priority: p.Spec.Priority}
	req := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{ExcludeOverhead: true})
	if q, ok := req[corev1.ResourceMemory]; ok && !q.IsZero() {
		v := q.Value()
		if o, ok := p.Spec.Overhead[corev1.ResourceMemory]; ok {
			v += o.Value()
		}
		a.MemoryRequestBytes, a.HasMemoryRequest = v, true
	}
	if s := p.Spec.TerminationGracePeriodSeconds; s != nil && *s >= 0 {
		d := time.Duration(*s) * time.Second
		a.TerminationGracePeriod = &d
	}
	taint := &corev1.Taint{Key: corev1.TaintNodeMemoryPressure, Effect: corev1.TaintEffectNoSchedule}
	for i := range p.Spec.Tolerations {
		// the taint has no value: comparison operators never match it
		if p.Spec.Tolerations[i].ToleratesTaint(klog.Background(), taint, false) {
			a.ToleratesMemoryPressure = true
			break
		}
	}
	_, a.Mirror = p.Annotations[corev1.MirrorPodAnnotationKey]
	for _, c := range p.Spec.Containers {
		a.Containers = append(a.Containers, pod.ContainerRequest{Name: c.Name, MemoryRequest: c.Resources.Requests[corev1.ResourceMemory]})
	}
	return a
}

// Pod returns what the API says of the pod with this UID, from the cache;
// ok is false when the API does not know it (yet). It never blocks.
func (c *Client) Pod(uid string) (pod.API, bool) {
	p, ok := byUID(c.pods, uid)
	if !ok {
		return pod.API{}, false
	}
	return APIOf(p), true
}

// runInformer runs the pod informer until ctx ends.
func (c *Client) runInformer(ctx context.Context) {
	c.pods.RunWithContext(ctx)
}
