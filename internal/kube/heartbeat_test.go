package kube

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cri-guard/cri-guard/internal/testutil"
)

// TestHeartbeatPeriod: unchanged, the condition is written once per
// heartbeat period at most, and at most a fifth of it later; retries and
// heartbeats are jittered within their bounds; New defaults the period to
// 5 min and refuses one under 10 s.
func TestHeartbeatPeriod(t *testing.T) {
	const period = time.Minute
	f := &fakeServer{cs: fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})}
	now := time.Unix(5000, 0)
	var mu sync.Mutex
	r := 0.999
	c := newClient(f, "node-1", 10*time.Millisecond, nil, nil)
	c.heartbeat = period
	c.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	c.rand = func() float64 { mu.Lock(); defer mu.Unlock(); return r }
	step := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock(); c.poke() }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	patches := func() int { return f.count("patch", "nodes", "status") }

	c.SetNodePressure(NodePressure{})
	testutil.WaitFor(t, "written", func() bool { return patches() == 1 && c.State().Pending == 0 })
	// the most jitter: due at 1.1998 periods
	step(period)
	settled(t, c)
	if n := patches(); n != 1 {
		t.Fatalf("%d writes one period after the first, with the most jitter: want 1", n)
	}
	step(period / 5)
	testutil.WaitFor(t, "the heartbeat, within a fifth of a period more", func() bool { return patches() == 2 })
	settled(t, c)
	// the least jitter: due one period later, not before
	mu.Lock()
	r = 0
	mu.Unlock()
	// the period was drawn at the last write (with r = 0.999): one more
	// write at the most jitter, then one period exactly
	step(period * 6 / 5)
	testutil.WaitFor(t, "third", func() bool { return patches() == 3 })
	settled(t, c)
	step(period - time.Second)
	settled(t, c)
	if n := patches(); n != 3 {
		t.Fatalf("%d writes: a heartbeat came before its period", n)
	}
	step(time.Second)
	testutil.WaitFor(t, "fourth, one period after the third", func() bool { return patches() == 4 })

	// the bounds with the real source of randomness
	j := &Client{rand: rand.Float64, retry: 100 * time.Millisecond}
	spread := map[time.Duration]bool{}
	for range 1000 {
		d := j.jitter(period, heartbeatJitter)
		if d < period || d > period*6/5 {
			t.Fatalf("heartbeat %v: want within [%v, %v]", d, period, period*6/5)
		}
		spread[d/time.Second] = true
		if b := j.backoff(1); b < 100*time.Millisecond || b > 150*time.Millisecond {
			t.Fatalf("first retry after %v: want within [100ms, 150ms]", b)
		}
	}
	if len(spread) < 5 {
		t.Fatalf("heartbeats over %d distinct seconds only: want them spread", len(spread))
	}

	api := newFakeAPI(t)
	kc, err := New(Config{Kubeconfig: api.kubeconfig(), NodeName: "node-1"}, nil, nil)
	if err != nil || kc.heartbeat != 5*time.Minute {
		t.Fatalf("New: heartbeat %v, %v; want 5m by default", kc.heartbeat, err)
	}
	if _, err := New(Config{Kubeconfig: api.kubeconfig(), NodeName: "node-1", Heartbeat: 5 * time.Second}, nil, nil); err == nil ||
		!strings.Contains(err.Error(), "must be at least 10s") {
		t.Fatalf("New with a 5s heartbeat: %v, want refused", err)
	}
}
