package kube

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// server is the part of the API server the client uses, core/v1 only:
// restServer in production (a REST client with a core/v1 scheme: the typed
// clientset would register every API group), and client-go's fake
// clientset in the unit tests.
type server interface {
	// podListWatch lists and watches the pods bound to node.
	podListWatch(node string) cache.ListerWatcher
	// patchPodStatus patches a pod's status subresource.
	patchPodStatus(ctx context.Context, namespace, name string, pt types.PatchType, patch []byte) (*corev1.Pod, error)
	// createEvent makes an event.
	createEvent(ctx context.Context, ev *corev1.Event) error
	// getNode reads the node.
	getNode(ctx context.Context, name string) (*corev1.Node, error)
	// patchNode patches the node (subresource "" or "status").
	patchNode(ctx context.Context, name, subresource string, pt types.PatchType, patch []byte) error
}

// restServer is the server over a core/v1 REST client.
type restServer struct{ rc rest.Interface }

var _ server = restServer{}

func (s restServer) podListWatch(node string) cache.ListerWatcher {
	return cache.NewListWatchFromClient(s.rc, "pods", corev1.NamespaceAll, fields.OneTermEqualSelector("spec.nodeName", node))
}

func (s restServer) patchPodStatus(ctx context.Context, namespace, name string, pt types.PatchType, patch []byte) (*corev1.Pod, error) {
	var p corev1.Pod
	err := s.rc.Patch(pt).Namespace(namespace).Resource("pods").Name(name).SubResource("status").
		Body(patch).Do(ctx).Into(&p)
	if err != nil {
		return nil, err
	}
	return &p, nil
}

func (s restServer) createEvent(ctx context.Context, ev *corev1.Event) error {
	return s.rc.Post().Namespace(ev.Namespace).Resource("events").Body(ev).Do(ctx).Error()
}

func (s restServer) getNode(ctx context.Context, name string) (*corev1.Node, error) {
	var n corev1.Node
	if err := s.rc.Get().Resource("nodes").Name(name).Do(ctx).Into(&n); err != nil {
		return nil, err
	}
	return &n, nil
}

func (s restServer) patchNode(ctx context.Context, name, subresource string, pt types.PatchType, patch []byte) error {
	req := s.rc.Patch(pt).Resource("nodes").Name(name)
	if subresource != "" {
		req = req.SubResource(subresource)
	}
	return req.Body(patch).Do(ctx).Error()
}
