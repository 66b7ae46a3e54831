package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/cri-guard/cri-guard/internal/testutil"
)

func pressuredNodes(n int, now time.Time) []*corev1.Node {
	var nodes []*corev1.Node
	for i := range n {
		st := corev1.ConditionFalse
		if i%2 == 0 {
			st = corev1.ConditionTrue
		}
		nodes = append(nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%d", i)},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{cond(st, now, now)}}})
	}
	return nodes
}

func startController(t *testing.T, ctx context.Context, api *apiServer) *Controller {
	t.Helper()
	f := informers.NewSharedInformerFactory(api.cs, 0)
	c, err := New(Config{}, Deps{Client: api.cs, Nodes: f.Core().V1().Nodes(), Log: logrus.NewEntry(logrus.New())})
	if err != nil {
		t.Fatal(err)
	}
	f.Start(ctx.Done())
	t.Cleanup(f.Shutdown)
	return c
}

// TestRunReconcilesAllWithoutGets: at start every Node is reconciled from
// the informer's list, and the controller's only requests are list, watch
// and patch (no GET per node).
func TestRunReconcilesAllWithoutGets(t *testing.T) {
	api := newAPIServer(t, pressuredNodes(20, time.Now())...)
	ctx, cancel := context.WithCancel(context.Background())
	c := startController(t, ctx, api)
	done := make(chan error, 1)
	go func() { done <- c.run(ctx) }()
	testutil.WaitFor(t, "10 taints", func() bool { return api.patches.Load() >= 10 })
	testutil.WaitFor(t, "the workers to idle", func() bool { return c.depth() == 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		n := api.node(t, fmt.Sprintf("n%d", i))
		if (ourTaint(n) != nil) != (i%2 == 0) {
			t.Errorf("node %s: taints %+v", n.Name, n.Spec.Taints)
		}
	}
	if got := api.patches.Load(); got != 10 {
		t.Errorf("patches = %d, want 10 (one per pressured node)", got)
	}
	for _, a := range api.cs.Actions() {
		switch a.GetVerb() {
		case "list", "watch", "patch":
		default:
			t.Errorf("unexpected request %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
}

// TestLeaderOnly: of two replicas on one Lease, only the holder writes;
// when it stops, it releases the Lease and the other takes over.
func TestLeaderOnly(t *testing.T) {
	api := newAPIServer(t, pressuredNodes(2, time.Now())...)
	lc := func(id string) LeaderConfig {
		// long leases: a slow test machine must not flip the leader
		return LeaderConfig{Namespace: "kube-system", Name: "cri-guard-controller", Identity: id,
			LeaseDuration: time.Minute, RenewDeadline: 40 * time.Second, RetryPeriod: 50 * time.Millisecond}
	}
	ctxA, cancelA := context.WithCancel(context.Background())
	a := startController(t, ctxA, api)
	doneA := make(chan error, 1)
	go func() { doneA <- a.RunElected(ctxA, api.cs, lc("a"), leaderelection.NewLeaderHealthzAdaptor(0)) }()
	testutil.WaitFor(t, "a to lead", func() bool { return promtest.ToFloat64(a.metrics.leader) == 1 })

	ctxB, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	b := startController(t, ctxB, api)
	doneB := make(chan error, 1)
	go func() { doneB <- b.RunElected(ctxB, api.cs, lc("b"), nil) }()
	testutil.WaitFor(t, "b's cache", b.Ready)
	testutil.WaitFor(t, "a's taint", func() bool { return ourTaint(api.node(t, "n0")) != nil })
	if v := promtest.ToFloat64(b.metrics.leader); v != 0 {
		t.Fatalf("b leads too")
	}

	// a is stopped: it releases the Lease, b takes over and acts
	cancelA()
	if err := <-doneA; err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "b to lead", func() bool { return promtest.ToFloat64(b.metrics.leader) == 1 })
	api.setCondition(t, "n1", cond(corev1.ConditionTrue, time.Now(), time.Now()))
	testutil.WaitFor(t, "b's taint", func() bool { return ourTaint(api.node(t, "n1")) != nil })
	if v := promtest.ToFloat64(a.metrics.applied); v != 1 {
		t.Errorf("a applied %v taints, want 1", v)
	}
	if v := promtest.ToFloat64(b.metrics.applied); v != 1 {
		t.Errorf("b applied %v taints, want 1 (n0 was a's)", v)
	}
	cancelB()
	if err := <-doneB; err != nil {
		t.Fatal(err)
	}
}
