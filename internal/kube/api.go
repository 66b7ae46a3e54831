package kube

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// server is the part of the API server the client uses, core/v1 only:
// restServer in production (a REST client with a core/v1 scheme: the typed
// clientset would register every API group), and client-go's fake
// clientset or an in-process API server in the unit tests.
type server interface {
	// podListWatch lists and watches the pods bound to node.
	podListWatch(node string) cache.ListerWatcher
	// nodeListWatch lists and watches the Node named node, alone.
	nodeListWatch(node string) cache.ListerWatcher
	// patchPodStatus patches a pod's status subresource.
	patchPodStatus(ctx context.Context, namespace, name string, pt types.PatchType, patch []byte) (*corev1.Pod, error)
	// createEvent, updateEvent and patchEvent write an event and return
	// it as written (the event sink of events.go).
	createEvent(ctx context.Context, ev *corev1.Event) (*corev1.Event, error)
	updateEvent(ctx context.Context, ev *corev1.Event) (*corev1.Event, error)
	patchEvent(ctx context.Context, namespace, name string, patch []byte) (*corev1.Event, error)
	// patchNodeStatus patches the node's status subresource, the only
	// write to a Node that NodeRestriction lets a node make of its own
	// (its spec, taints included, is not its to change).
	patchNodeStatus(ctx context.Context, name string, pt types.PatchType, patch []byte) (*corev1.Node, error)
}

// The deadlines of list and watch requests. A list of a node's pods may
// be megabytes: it gets at least minListTimeout. A watch is ended by the
// server after the timeoutSeconds the reflector asks for (5 to 10 min, at
// random); the client gives up watchSlack later, should the server or the
// path to it vanish without a word.
const (
	minListTimeout = time.Minute
	watchSlack     = time.Minute
)

// relistSpread bounds the wait before a relist (and before a watch's
// reopen after the server ended it early: see gate). When an API server comes
// back after a restart its watch cache starts anew, every watch's resource
// version is too old, and every node relists: without the wait all nodes
// of a fleet do so in the same second the server is ready (measured: all
// within half a second), a burst as large as the fleet. Spread uniformly
// over 15 s, 5,000 nodes make about 330 lists a second (×2: pods and the
// Node). The pod cache is at most that much staler after an outage; the
// sync loop decides without the API meanwhile.
const relistSpread = 15 * time.Second

// restServer is the server over a core/v1 REST client; timeout bounds
// each read and write.
type restServer struct {
	rc      rest.Interface
	timeout time.Duration
	// relistWait is the wait before a relist (nil: a random wait within
	// relistSpread); tests set their own.
	relistWait func(context.Context) error
}

// spreadWait waits a random time within relistSpread, or until ctx ends.
func spreadWait(ctx context.Context) error {
	t := time.NewTimer(rand.N(relistSpread))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// gate holds back a reflector's requests where a fleet would make them
// together. A list (or a watch-list) after the reflector's first
// successful one waits within relistSpread: it follows a 410, which an API
// server's restart gives every node at once. A first list that failed is
// not waited for again: a fallback from watch-list to a plain list at
// start is not delayed.
//
// A plain watch waits too when the one before it was ended by the server
// well before the timeout the reflector asked for (earlyEnd of it): the
// server went away (a restart, a load balancer or a peer reset), and
// every node's watch ended in the same second. Without the wait they all
// reopen in the second the server is back (measured on a real API server
// restart: every node's pod and Node watch within one second). Each open
// after such an end waits until one is answered, so retries against a
// server still down keep spreading; an ended watch that lasted its time
// (the server's timeout, 5 to 10 min) is reopened at once.
type gate struct {
	listed atomic.Bool
	early  atomic.Bool
	wait   func(context.Context) error
}

// earlyEnd is the share of its asked timeout below which a watch's end is
// the server's going away rather than its timeout.
const earlyEnd = 0.9

func (g *gate) beforeList(ctx context.Context) error {
	if !g.listed.Load() && !g.early.Load() {
		return nil
	}
	return g.wait(ctx)
}

func (g *gate) listDone(err error) {
	if err == nil {
		g.listed.Store(true)
		g.early.Store(false)
	}
}

func (g *gate) beforeWatch(ctx context.Context) error {
	if !g.early.Load() {
		return nil
	}
	return g.wait(ctx)
}

func (g *gate) watchOpened() { g.early.Store(false) }

// watchEnded notes a watch's end after lasted of the asked timeout.
func (g *gate) watchEnded(lasted, asked time.Duration) {
	if float64(lasted) < earlyEnd*float64(asked) {
		g.early.Store(true)
	}
}

var _ server = restServer{}

func (s restServer) podListWatch(node string) cache.ListerWatcher {
	return s.listWatch("pods", fields.OneTermEqualSelector("spec.nodeName", node))
}

func (s restServer) nodeListWatch(node string) cache.ListerWatcher {
	return s.listWatch("nodes", fields.OneTermEqualSelector("metadata.name", node))
}

// listWatch lists and watches resource (all namespaces) with a field
// selector, as cache.NewListWatchFromClient does, with deadlines of the
// request's own rather than the HTTP client's, through a gate.
func (s restServer) listWatch(resource string, sel fields.Selector) cache.ListerWatcher {
	g := &gate{wait: s.relistWait}
	if g.wait == nil {
		g.wait = spreadWait
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			if err := g.beforeList(ctx); err != nil {
				return nil, err
			}
			o.FieldSelector = sel.String()
			ctx, cancel := context.WithTimeout(ctx, max(s.timeout, minListTimeout))
			defer cancel()
			obj, err := s.rc.Get().Resource(resource).VersionedParams(&o, params).Do(ctx).Get()
			g.listDone(err)
			return obj, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			initial := o.SendInitialEvents != nil && *o.SendInitialEvents
			wait := g.beforeWatch
			if initial {
				wait = g.beforeList
			}
			if err := wait(ctx); err != nil {
				return nil, err
			}
			o.FieldSelector, o.Watch = sel.String(), true
			d := 10 * time.Minute
			if o.TimeoutSeconds != nil {
				d = time.Duration(*o.TimeoutSeconds) * time.Second
			}
			ctx, cancel := context.WithTimeout(ctx, d+watchSlack)
			w, err := s.rc.Get().Resource(resource).VersionedParams(&o, params).Watch(ctx)
			if err != nil {
				cancel()
				return nil, err
			}
			if initial {
				// a watch-list: the list is its initial events
				g.listDone(nil)
			}
			g.watchOpened()
			start := time.Now()
			return &endedWatch{Interface: w, stop: func() {
				cancel()
				g.watchEnded(time.Since(start), d)
			}}, nil
		},
	}
	return cache.ToListWatcherWithWatchListSemantics(lw, s.rc)
}

// endedWatch is a watch whose request context ends with it, and whose
// end is told to the gate once.
type endedWatch struct {
	watch.Interface
	once sync.Once
	stop func()
}

func (w *endedWatch) Stop() {
	w.Interface.Stop()
	w.once.Do(w.stop)
}

func (s restServer) patchPodStatus(ctx context.Context, namespace, name string, pt types.PatchType, patch []byte) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var p corev1.Pod
	err := s.rc.Patch(pt).Namespace(namespace).Resource("pods").Name(name).SubResource("status").
		Body(patch).Do(ctx).Into(&p)
	if err != nil {
		return nil, err
	}
	return &p, nil
}

func (s restServer) createEvent(ctx context.Context, ev *corev1.Event) (*corev1.Event, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var out corev1.Event
	if err := s.rc.Post().Namespace(ev.Namespace).Resource("events").Body(ev).Do(ctx).Into(&out); err != nil {
		return nil, err
	}
	return &out, nil
}

func (s restServer) updateEvent(ctx context.Context, ev *corev1.Event) (*corev1.Event, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var out corev1.Event
	if err := s.rc.Put().Namespace(ev.Namespace).Resource("events").Name(ev.Name).Body(ev).Do(ctx).Into(&out); err != nil {
		return nil, err
	}
	return &out, nil
}

// patchEvent is a strategic merge patch, as the event correlator makes
// them (a repeat's count and last timestamp).
func (s restServer) patchEvent(ctx context.Context, namespace, name string, patch []byte) (*corev1.Event, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var out corev1.Event
	if err := s.rc.Patch(types.StrategicMergePatchType).Namespace(namespace).Resource("events").Name(name).
		Body(patch).Do(ctx).Into(&out); err != nil {
		return nil, err
	}
	return &out, nil
}

func (s restServer) patchNodeStatus(ctx context.Context, name string, pt types.PatchType, patch []byte) (*corev1.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var n corev1.Node
	if err := s.rc.Patch(pt).Resource("nodes").Name(name).SubResource("status").Body(patch).Do(ctx).Into(&n); err != nil {
		return nil, err
	}
	return &n, nil
}
