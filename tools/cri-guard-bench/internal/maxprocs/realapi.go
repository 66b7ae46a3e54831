package maxprocs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/fakenode"
)

// realAPI drives a real kube-apiserver (--kubeconfig): it makes the node
// object and the pods bound to it, and changes them.
type realAPI struct {
	rc   rest.Interface
	node string
	pods []*corev1.Pod
	log  *logrus.Entry
	seq  int64
	mu   sync.Mutex
}

func newRealAPI(kubeconfig, node string, log *logrus.Entry) (*realAPI, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %q: %w", kubeconfig, err)
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	metav1.AddToGroupVersion(scheme, corev1.SchemeGroupVersion)
	cfg.APIPath, cfg.GroupVersion = "/api", &corev1.SchemeGroupVersion
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	cfg.ContentType = runtime.ContentTypeJSON
	cfg.QPS, cfg.Burst = 500, 1000
	cfg.Timeout = 30 * time.Second
	cfg.UserAgent = "cri-guard-bench"
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return &realAPI{rc: rc, node: node, log: log}, nil
}

// setup makes the namespace, the node and the pods (Running, as a
// kubelet would report them), and returns the pods as the API has them.
func (a *realAPI) setup(ctx context.Context, n int) ([]*corev1.Pod, error) {
	ns := &corev1.Namespace{TypeMeta: metav1.TypeMeta{Kind: "Namespace", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: maxprocsNamespace}}
	if err := a.rc.Post().Resource("namespaces").Body(ns).Do(ctx).Error(); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create namespace: %w", err)
	}
	node := &corev1.Node{TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: a.node}}
	if err := a.rc.Post().Resource("nodes").Body(node).Do(ctx).Error(); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create node: %w", err)
	}
	// the ServiceAccount admission needs the namespace's default account
	deadline := time.Now().Add(time.Minute)
	for {
		err := a.rc.Get().Namespace(maxprocsNamespace).Resource("serviceaccounts").Name("default").Do(ctx).Error()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("default service account of %s: %w", maxprocsNamespace, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	pods := make([]*corev1.Pod, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			p := benchPod(i, a.node)
			var out corev1.Pod
			err := a.rc.Post().Namespace(maxprocsNamespace).Resource("pods").Body(p).Do(ctx).Into(&out)
			if apierrors.IsAlreadyExists(err) {
				err = a.rc.Get().Namespace(maxprocsNamespace).Resource("pods").Name(p.Name).Do(ctx).Into(&out)
			}
			if err != nil {
				errs[i] = fmt.Errorf("create pod %q: %w", p.Name, err)
				return
			}
			st := corev1.Pod{TypeMeta: p.TypeMeta, ObjectMeta: out.ObjectMeta, Spec: out.Spec, Status: fakenode.RunningStatus(&out, i, start)}
			err = a.rc.Put().Namespace(maxprocsNamespace).Resource("pods").Name(p.Name).SubResource("status").Body(&st).Do(ctx).Into(&out)
			if err != nil {
				errs[i] = fmt.Errorf("pod %q status: %w", p.Name, err)
				return
			}
			pods[i] = &out
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	a.pods = pods
	return pods, nil
}

// update changes the update annotation of the i-th pod.
func (a *realAPI) update(ctx context.Context, i int) error {
	a.mu.Lock()
	a.seq++
	seq := a.seq
	a.mu.Unlock()
	p := a.pods[i%len(a.pods)]
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{fakenode.UpdateAnnotation: strconv.FormatInt(seq, 10)}}})
	return a.rc.Patch(types.MergePatchType).Namespace(p.Namespace).Resource("pods").Name(p.Name).Body(patch).Do(ctx).Error()
}

// eventBytes is the size of a pod's JSON as the API server sends it.
func (a *realAPI) eventBytes(ctx context.Context) int {
	if len(a.pods) == 0 {
		return 0
	}
	b, err := a.rc.Get().Namespace(maxprocsNamespace).Resource("pods").Name(a.pods[0].Name).DoRaw(ctx)
	if err != nil {
		return 0
	}
	return len(b)
}

// cleanup deletes the pods at once (no kubelet would confirm a graceful
// deletion), the namespace and the node.
func (a *realAPI) cleanup(ctx context.Context) error {
	var errs []error
	del := metav1.DeleteOptions{GracePeriodSeconds: new(int64)}
	err := a.rc.Delete().Namespace(maxprocsNamespace).Resource("pods").Body(&del).Do(ctx).Error()
	if err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("delete pods: %w", err))
	}
	if err := a.rc.Delete().Resource("namespaces").Name(maxprocsNamespace).Do(ctx).Error(); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("delete namespace: %w", err))
	}
	if err := a.rc.Delete().Resource("nodes").Name(a.node).Do(ctx).Error(); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("delete node: %w", err))
	}
	return errors.Join(errs...)
}
