package guard

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/internal/evictor"
	"github.com/cri-guard/cri-guard/internal/pressure"
	"github.com/cri-guard/cri-guard/internal/testutil"
)

// nearEvictor is a ruleEvictor that says whether it is near a threshold
// and counts its samples.
type nearEvictor struct {
	ruleEvictor
	near     atomic.Bool
	observes atomic.Int64
	passes   atomic.Int64
}

func (e *nearEvictor) Observe() { e.observes.Add(1) }

// Evaluation meets a threshold while near is set.
func (e *nearEvictor) Evaluation() evictor.Evaluation {
	if !e.near.Load() {
		return evictor.Evaluation{}
	}
	return evictor.Evaluation{Met: []pressure.Met{{}}}
}

func (e *nearEvictor) Synchronize(p evictor.Pass) evictor.Action {
	e.passes.Add(1)
	a := e.ruleEvictor.Synchronize(p)
	a.Near = e.Evaluation().NearThreshold(p.NearMargin)
	return a
}

func TestFastPoll(t *testing.T) {
	rt := newFakeRuntime()
	ev := &nearEvictor{}
	newHarness(t, withConfig(func(c *Config) {
		c.FastPoll = FastPoll{Interval: time.Millisecond, Watch: 5 * time.Millisecond, Margin: 1}
	}),
		withRuntime(rt), withEvictor(ev), running())
	eventually := func(what string, ok func() bool) {
		t.Helper()
		if !testutil.Within(testutil.Bound, ok) {
			t.Fatalf("%s: observes %d, passes %d", what, ev.observes.Load(), ev.passes.Load())
		}
	}
	// far from every threshold: node samples alone, no passes
	eventually("watch samples", func() bool { return ev.observes.Load() >= 3 })
	if n := ev.passes.Load(); n != 0 {
		t.Fatalf("far from thresholds: %d evaluation passes, want node samples only", n)
	}
	// near: full passes at the fast interval
	ev.near.Store(true)
	eventually("fast passes", func() bool { return ev.passes.Load() >= 5 })
}

func TestFastPollOff(t *testing.T) {
	if newFastPoller(FastPoll{}, &nearEvictor{}, nil, time.Hour) != nil {
		t.Error("a zero interval must disable the fast poll")
	}
}
