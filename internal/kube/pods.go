package kube

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"

	"github.com/cri-guard/cri-guard/internal/pod"
)

// uidIndex indexes the pod cache by UID, the key CRI carries.
const uidIndex = "uid"

// newPodInformer watches the pods bound to node (the Node authorizer lets a
// node list and watch exactly these), indexed by UID.
func newPodInformer(lw cache.ListerWatcher) cache.SharedIndexInformer {
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

// apiOf derives what cri-guard needs of an API pod, as the kubelet
// computes it: the memory request of GetResourceRequestQuantity
// (pkg/api/v1/resource: PodRequests without overhead, then the overhead
// when the request is not zero), the memory-pressure toleration of the
// eviction manager's Admit (TolerationsTolerateTaint with
// node.kubernetes.io/memory-pressure:NoSchedule), mirror pods by their
// annotation.
func apiOf(p *corev1.Pod) pod.API {
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
// ok is false when the API does not know it (yet). It never blocks: the
// view was derived (apiOf) when the informer last saw the pod change, not
// at each call (the sync loop asks for every pod on every pass).
func (c *Client) Pod(uid string) (pod.API, bool) {
	c.viewMu.RLock()
	defer c.viewMu.RUnlock()
	v, ok := c.views[uid]
	return v.api, ok
}

// podView is what cri-guard reads of a cached pod, derived once per change.
type podView struct {
	api pod.API
	// owner is the UID of the pod's controller (a ReplicaSet, a Job...);
	// empty for a pod without one.
	owner string
}

// setView derives the pod's view when the informer sees it added or
// changed; a resync of an unchanged pod keeps the view it has.
func (c *Client) setView(old, p *corev1.Pod) {
	if old != nil && old.ResourceVersion != "" && old.ResourceVersion == p.ResourceVersion {
		c.viewMu.RLock()
		_, ok := c.views[string(p.UID)]
		c.viewMu.RUnlock()
		if ok {
			return
		}
	}
	v := podView{api: apiOf(p)}
	if ref := metav1.GetControllerOfNoCopy(p); ref != nil {
		v.owner = string(ref.UID)
	}
	c.viewMu.Lock()
	c.views[string(p.UID)] = v
	c.viewMu.Unlock()
}

// dropView forgets a deleted pod's view.
func (c *Client) dropView(uid string) {
	c.viewMu.Lock()
	delete(c.views, uid)
	c.viewMu.Unlock()
}
