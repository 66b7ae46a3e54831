package evictor

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/pressure"
)

const mi = int64(1 << 20)

// fakeSampler returns whatever the test set.
type fakeSampler struct {
	node    pressure.NodeSample
	nodeErr error
	pods    map[string]pressure.PodStats // by cgroup parent
	nodes   int                          // the node samples taken
}

func (f *fakeSampler) Node() (pressure.NodeSample, error) { f.nodes++; return f.node, f.nodeErr }

func (f *fakeSampler) Pod(parent string) (pressure.PodStats, error) {
	if st, ok := f.pods[parent]; ok {
		return st, nil
	}
	return pressure.PodStats{}, pressure.ErrNoStats
}

// available sets memory.available on a 1000Mi node.
func (f *fakeSampler) available(b int64) {
	f.node = pressure.NodeSample{CapacityBytes: 1000 * mi, WorkingSetBytes: 1000*mi - b, AvailableBytes: b}
}

// recorder records kills.
type recorder struct {
	mu     sync.Mutex
	killed []string
	grace  []time.Duration
	err    error
}

func (r *recorder) kill(p *pod.Pod, grace time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.err
	}
	r.killed = append(r.killed, p.Name)
	r.grace = append(r.grace, grace)
	return nil
}

// pass is one housekeeping pass as the sync loop runs it: Synchronize,
// then the stop of its choice and the outcome reported back.
func (r *recorder) pass(m *Manager, active []*pod.Pod) (*Eviction, error) {
	e, err := synchronize(m, active)
	if err != nil || e == nil {
		return e, err
	}
	if err := r.kill(e.Pod, e.Grace); err != nil {
		m.EvictionFailed(e, err)
		return e, err
	}
	m.Evicted(e)
	return e, nil
}

// isEvicted reports whether the re-admission guard holds the pod.
func (m *Manager) isEvicted(uid string) bool {
	_, ok := m.evicted[uid]
	return ok
}

// clock is a stepped clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time       { return c.t }
func (c *clock) step(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                { return &clock{t: time.Unix(1_700_000_000, 0)} }
func quietLog() *logrus.Entry {
	l := logrus.New()
	l.SetLevel(logrus.PanicLevel)
	return logrus.NewEntry(l)
}

func thresholds(t *testing.T, tc pressure.ThresholdConfig) []pressure.Threshold {
	t.Helper()
	ts, err := pressure.ParseThresholds(tc)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func newManager(t *testing.T, cfg Config, s *fakeSampler, r *recorder, c *clock) *Manager {
	t.Helper()
	m, err := New(cfg, Options{Sampler: s, Now: c.now, Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// mkPod builds a ready pod with a cgroup parent named after it.
func mkPod(name string, qos pod.QOSClass, priority int32, critical, static bool, evictable bool) *pod.Pod {
	return &pod.Pod{UID: "uid-" + name, Name: name, Namespace: "default", QOS: qos, Priority: priority,
		Critical: critical, Static: static, Evictable: evictable, State: pod.StateReady,
		SandboxID: "sb-" + name, CgroupParent: "/kubepods/" + name}
}

func TestAdmitRules(t *testing.T) {
	tests := []struct {
		name      string
		available int64
		pod       *pod.Pod
		admit     bool
	}{
		{"no pressure besteffort", 500 * mi, mkPod("a", pod.BestEffort, 0, false, false, true), true},
		{"pressure besteffort", 50 * mi, mkPod("a", pod.BestEffort, 0, false, false, true), false},
		{"pressure burstable", 50 * mi, mkPod("a", pod.Burstable, 0, false, false, true), true},
		{"pressure guaranteed", 50 * mi, mkPod("a", pod.Guaranteed, 0, false, false, true), true},
		{"pressure critical besteffort", 50 * mi, mkPod("a", pod.BestEffort, 0, true, true, false), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, r, c := &fakeSampler{}, &recorder{}, newClock()
			s.available(tt.available)
			m := newManager(t, Config{Thresholds: thresholds(t, pressure.ThresholdConfig{Hard: map[string]string{"memory.available": "100Mi"}})}, s, r, c)
			if _, err := synchronize(m, nil); err != nil {
				t.Fatal(err)
			}
			res := m.Admit(&Attributes{Pod: tt.pod})
			if res.Admit != tt.admit {
				t.Fatalf("admit = %v, want %v (%+v)", res.Admit, tt.admit, res)
			}
			if !res.Admit {
				if res.Reason != "Evicted" || !strings.HasPrefix(res.Message, "The node had condition: [MemoryPressure]. ") {
					t.Fatalf("refusal = %+v", res)
				}
				if !strings.Contains(res.Message, "memory.available 50Mi < 100Mi") {
					t.Fatalf("refusal message lacks the observed signal and threshold: %q", res.Message)
				}
			}
		})
	}
}

func TestOnStatsError(t *testing.T) {
	for _, pol := range []StatsErrorPolicy{statsErrorAdmit, statsErrorReject} {
		t.Run(string(pol), func(t *testing.T) {
			s, r, c := &fakeSampler{nodeErr: errors.New("no meminfo")}, &recorder{}, newClock()
			m := newManager(t, Config{OnStatsError: pol}, s, r, c)
			if _, err := synchronize(m, nil); err == nil {
				t.Fatal("Synchronize without stats: no error")
			}
			be := m.Admit(&Attributes{Pod: mkPod("a", pod.BestEffort, 0, false, false, true)})
			crit := m.Admit(&Attributes{Pod: mkPod("b", pod.BestEffort, 0, true, true, false)})
			if be.Admit != (pol == statsErrorAdmit) || !crit.Admit {
				t.Fatalf("besteffort admit = %v, critical admit = %v under %s", be.Admit, crit.Admit, pol)
			}
			snap := m.Snapshot()
			if snap.StatsError == "" || snap.Decisions[0].Kind != KindStatsError {
				t.Fatalf("stats error not recorded: %+v", snap)
			}
		})
	}
}

func TestRankingOrder(t *testing.T) {
	s := &fakeSampler{pods: map[string]pressure.PodStats{
		"/kubepods/be-small":   {HasMemory: true, WorkingSetBytes: 10 * mi},
		"/kubepods/be-big":     {HasMemory: true, WorkingSetBytes: 300 * mi},
		"/kubepods/bu-under":   {HasMemory: true, WorkingSetBytes: 100 * mi, RequestBytes: 200 * mi, HasRequest: true},
		"/kubepods/bu-over":    {HasMemory: true, WorkingSetBytes: 300 * mi, RequestBytes: 200 * mi, HasRequest: true},
		"/kubepods/bu-over-hp": {HasMemory: true, WorkingSetBytes: 900 * mi, RequestBytes: 100 * mi, HasRequest: true},
	}}
	m := newManager(t, Config{}, s, &recorder{}, newClock())
	pods := []*pod.Pod{
		mkPod("bu-under", pod.Burstable, 0, false, false, true),
		mkPod("be-small", pod.BestEffort, 0, false, false, true),
		mkPod("bu-over-hp", pod.Burstable, 1000, false, false, true),
		mkPod("nostats", pod.Burstable, 5000, false, false, true),
		mkPod("be-big", pod.BestEffort, 0, false, false, true),
		mkPod("bu-over", pod.Burstable, 0, false, false, true),
		mkPod("critical", pod.BestEffort, 0, true, true, false),
	}
	var got []string
	for _, c := range m.rank(pods) {
		got = append(got, c.Pod.Name)
	}
	want := "nostats be-big bu-over be-small bu-over-hp bu-under"
	if strings.Join(got, " ") != want {
		t.Fatalf("rank = %v, want %s", got, want)
	}
}

func TestCriticalProtection(t *testing.T) {
	// under modern rules every critical pod is unevictable; under seed
	// rules only critical AND static pods are (pod.Evictable carries it).
	tests := []struct {
		name     string
		pods     []*pod.Pod
		wantKill string
	}{
		{"modern: critical static kept, plain evicted", []*pod.Pod{
			mkPod("crit", pod.BestEffort, 0, true, true, false), mkPod("plain", pod.Guaranteed, 0, false, false, true)}, "plain"},
		{"seed: critical non-static is evictable", []*pod.Pod{
			mkPod("crit-static", pod.BestEffort, 0, true, true, false), mkPod("crit-api", pod.BestEffort, 0, true, false, true)}, "crit-api"},
		{"only critical pods: unable to evict", []*pod.Pod{mkPod("crit", pod.BestEffort, 0, true, true, false)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, r, c := &fakeSampler{}, &recorder{}, newClock()
			s.available(50 * mi)
			m := newManager(t, Config{Thresholds: thresholds(t, pressure.ThresholdConfig{Hard: map[string]string{"memory.available": "100Mi"}})}, s, r, c)
			victim, err := r.pass(m, tt.pods)
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(r.killed, ",")
			if got != tt.wantKill {
				t.Fatalf("killed %q, want %q", got, tt.wantKill)
			}
			if tt.wantKill == "" {
				if victim != nil {
					t.Fatalf("victim = %v", victim)
				}
				d := m.Snapshot().Decisions
				if d[len(d)-1].Kind != KindUnable || !strings.Contains(d[len(d)-1].Message, "unable to evict any pods") {
					t.Fatalf("last decision = %+v", d[len(d)-1])
				}
				if _, err := r.pass(m, tt.pods); err != nil {
					t.Fatal(err)
				}
				if n := len(m.Snapshot().Decisions); n != len(d) {
					t.Fatalf("a second pass with nothing to evict added a decision (%d → %d)", len(d), n)
				}
			}
		})
	}
}

// TestMemoryPressure walks through the life of a pressure episode, as the
// kubelet's test of the same name does.
func TestMemoryPressure(t *testing.T) {
	s, r, c := &fakeSampler{}, &recorder{}, newClock()
	cfg := Config{
		Thresholds: thresholds(t, pressure.ThresholdConfig{
			Hard:            map[string]string{"memory.available": "100Mi"},
			Soft:            map[string]string{"memory.available": "300Mi"},
			SoftGracePeriod: map[string]string{"memory.available": "30s"},
			MinimumReclaim:  map[string]string{"memory.available": "200Mi"},
		}),
		TransitionPeriod:  5 * time.Minute,
		MaxPodGracePeriod: 30 * time.Second,
		HardGracePeriod:   time.Second,
	}
	m := newManager(t, cfg, s, r, c)
	be := mkPod("be", pod.BestEffort, 0, false, false, true)
	bu := mkPod("bu", pod.Burstable, 0, false, false, true)
	crit := mkPod("crit", pod.BestEffort, 0, true, true, false)
	s.pods = map[string]pressure.PodStats{
		be.CgroupParent: {HasMemory: true, WorkingSetBytes: 200 * mi},
		bu.CgroupParent: {HasMemory: true, WorkingSetBytes: 150 * mi, RequestBytes: 100 * mi},
	}
	active := []*pod.Pod{crit, bu, be}
	sync := func() {
		t.Helper()
		if _, err := r.pass(m, active); err != nil {
			t.Fatal(err)
		}
	}
	admitBE := func() bool {
		return m.Admit(&Attributes{Pod: mkPod("new-be", pod.BestEffort, 0, false, false, true)}).Admit
	}

	// no pressure
	s.available(500 * mi)
	sync()
	if len(r.killed) != 0 || !admitBE() {
		t.Fatalf("no pressure: killed %v", r.killed)
	}
	// soft threshold met, grace not elapsed: condition set, nothing killed
	s.available(250 * mi)
	sync()
	if len(r.killed) != 0 {
		t.Fatalf("soft before grace killed %v", r.killed)
	}
	if admitBE() {
		t.Fatal("besteffort admitted while the soft threshold is met")
	}
	// soft threshold after grace: one pod, soft grace period
	c.step(31 * time.Second)
	sync()
	if len(r.killed) != 1 || r.killed[0] != "be" || r.grace[0] != 30*time.Second {
		t.Fatalf("after grace: killed %v grace %v, want be with 30s", r.killed, r.grace)
	}
	// the evicted pod is refused while pressure lasts, with the kubelet's message
	res := m.Admit(&Attributes{Pod: mkPod("be", pod.Burstable, 0, false, false, true)})
	if res.Admit || !strings.HasPrefix(res.Message, "The node was low on resource: memory. Threshold quantity: 300Mi, available: 250Mi. ") {
		t.Fatalf("re-admission of the evicted pod = %+v", res)
	}
	// hard threshold: next pod in rank, short grace; the critical one never
	active = []*pod.Pod{crit, bu}
	s.available(50 * mi)
	c.step(time.Second)
	sync()
	if len(r.killed) != 2 || r.killed[1] != "bu" || r.grace[1] != time.Second {
		t.Fatalf("hard: killed %v grace %v", r.killed, r.grace)
	}
	active = []*pod.Pod{crit}
	c.step(time.Second)
	sync()
	if len(r.killed) != 2 {
		t.Fatalf("critical pod killed: %v", r.killed)
	}
	// above the soft threshold but below threshold+min-reclaim (300+200): still acting
	s.available(400 * mi)
	c.step(time.Second)
	sync()
	if snap := m.Snapshot(); len(snap.Met) == 0 {
		t.Fatal("min-reclaim should keep the threshold active at 400Mi")
	}
	// reclaimed: no threshold met, but the condition holds for the transition period
	s.available(600 * mi)
	c.step(time.Second)
	sync()
	if snap := m.Snapshot(); len(snap.Met) != 0 || len(snap.Conditions) != 1 {
		t.Fatalf("after reclaim: met %v conditions %v", snap.Met, snap.Conditions)
	}
	if admitBE() {
		t.Fatal("besteffort admitted during the transition period")
	}
	if m.Admit(&Attributes{Pod: mkPod("be", pod.Burstable, 0, false, false, true)}).Admit {
		t.Fatal("evicted pod admitted during the transition period")
	}
	// transition over: everything is admitted again, the evicted pod too
	c.step(5 * time.Minute)
	sync()
	if !admitBE() || !m.Admit(&Attributes{Pod: mkPod("be", pod.Burstable, 0, false, false, true)}).Admit {
		t.Fatal("pods refused after the transition period")
	}
}

func TestOnePodPerInterval(t *testing.T) {
	s, r, c := &fakeSampler{}, &recorder{}, newClock()
	s.available(10 * mi)
	m := newManager(t, Config{Thresholds: thresholds(t, pressure.ThresholdConfig{Hard: map[string]string{"memory.available": "100Mi"}})}, s, r, c)
	active := []*pod.Pod{mkPod("a", pod.BestEffort, 0, false, false, true), mkPod("b", pod.BestEffort, 0, false, false, true)}
	if _, err := r.pass(m, active); err != nil {
		t.Fatal(err)
	}
	if len(r.killed) != 1 {
		t.Fatalf("one pass killed %d pods, want 1", len(r.killed))
	}
}

func TestDryRun(t *testing.T) {
	s, r, c := &fakeSampler{}, &recorder{}, newClock()
	s.available(10 * mi)
	m := newManager(t, Config{DryRun: true, Thresholds: thresholds(t, pressure.ThresholdConfig{Hard: map[string]string{"memory.available": "100Mi"}})}, s, r, c)
	victim, err := r.pass(m, []*pod.Pod{mkPod("a", pod.BestEffort, 0, false, false, true)})
	if err != nil {
		t.Fatal(err)
	}
	if victim != nil || len(r.killed) != 0 {
		t.Fatalf("dry run: victim %v killed %v, want nothing to stop", victim, r.killed)
	}
	if d := m.Snapshot().Decisions; d[len(d)-1].Kind != KindDryRun || d[len(d)-1].Pod.Name != "a" {
		t.Fatalf("decision = %+v", d[len(d)-1])
	}
	if m.isEvicted("uid-a") {
		t.Fatal("dry run must not mark the pod evicted")
	}
}

// TestStopFailure: a stop that failed is counted as a failure, not an
// eviction; the pod is not guarded, stays a candidate and is chosen again
// by the next pass, whose successful stop is the eviction.
func TestStopFailure(t *testing.T) {
	s, r, c := &fakeSampler{}, &recorder{err: errors.New("runtime down")}, newClock()
	s.available(10 * mi)
	m := newManager(t, Config{Thresholds: thresholds(t, pressure.ThresholdConfig{Hard: map[string]string{"memory.available": "100Mi"}})}, s, r, c)
	a := mkPod("a", pod.BestEffort, 0, false, false, true)
	e, err := r.pass(m, []*pod.Pod{a})
	if err == nil || e == nil || e.Pod.Name != "a" {
		t.Fatalf("first pass: eviction %v, err %v; want a and the stop error", e, err)
	}
	if m.isEvicted("uid-a") {
		t.Fatal("a pod that was not stopped must not be marked evicted")
	}
	kinds := func() (out []Kind) {
		for _, d := range m.Snapshot().Decisions {
			out = append(out, d.Kind)
		}
		return out
	}
	// 10Mi is under half of the 100Mi hard threshold: the pass that
	// chose a also cut its grace period, and said so
	if got := kinds(); !slices.Equal(got, []Kind{KindGraceCut, KindEvictFailed}) {
		t.Fatalf("decisions after the failed stop = %v", got)
	}
	if snap := m.Snapshot(); len(snap.Ranked) != 1 || snap.Ranked[0].Name != "a" {
		t.Fatalf("ranked after the failed stop = %+v", snap.Ranked)
	}
	r.err = nil
	c.step(time.Second)
	if e, err := r.pass(m, []*pod.Pod{a}); err != nil || e == nil || e.Pod.Name != "a" {
		t.Fatalf("second pass: eviction %v, err %v", e, err)
	}
	if !m.isEvicted("uid-a") || !slices.Equal(kinds(), []Kind{KindGraceCut, KindEvictFailed, KindGraceCut, KindEvict}) {
		t.Fatalf("after the stop: guarded %v, decisions %v", m.isEvicted("uid-a"), kinds())
	}
}

func BenchmarkRank1000(b *testing.B) {
	s := &fakeSampler{pods: map[string]pressure.PodStats{}}
	var pods []*pod.Pod
	for i := range 1000 {
		p := mkPod("p"+strconv.Itoa(i), []pod.QOSClass{pod.BestEffort, pod.Burstable, pod.Guaranteed}[i%3], int32(i%5), false, false, true)
		pods = append(pods, p)
		if i%10 != 0 {
			s.pods[p.CgroupParent] = pressure.PodStats{HasMemory: true, WorkingSetBytes: int64(i) * mi, RequestBytes: int64(i%4) * 100 * mi}
		}
	}
	m := newManager(&testing.T{}, Config{}, s, &recorder{}, newClock())
	b.ReportAllocs()
	for b.Loop() {
		m.rank(pods)
	}
}

// BenchmarkAdmit is the admission decision alone: a read of the last
// evaluation.
func BenchmarkAdmit(b *testing.B) {
	s, c := &fakeSampler{}, newClock()
	s.available(50 * mi)
	ts, err := pressure.ParseThresholds(pressure.ThresholdConfig{Hard: map[string]string{"memory.available": "100Mi"}})
	if err != nil {
		b.Fatal(err)
	}
	m, err := New(Config{Thresholds: ts}, Options{Sampler: s, Now: c.now, Log: quietLog()})
	if err != nil {
		b.Fatal(err)
	}
	a := &Attributes{Pod: mkPod("a", pod.BestEffort, 0, false, false, true)}
	if _, err := synchronize(m, nil); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		m.Admit(a)
	}
}

// TestMarkEvicted: the guard restored from a checkpoint refuses the pod's
// recreation while pressure lasts, with the current figures, and is
// forgotten once the pressure is over.
func TestMarkEvicted(t *testing.T) {
	s, r, c := &fakeSampler{}, &recorder{}, newClock()
	m := newManager(t, Config{Thresholds: thresholds(t, pressure.ThresholdConfig{Hard: map[string]string{"memory.available": "100Mi"}})}, s, r, c)
	bu := mkPod("bu", pod.Burstable, 0, false, false, true)
	m.MarkEvicted(bu, c.now())
	s.available(50 * mi)
	if _, err := r.pass(m, nil); err != nil {
		t.Fatal(err)
	}
	res := m.Admit(&Attributes{Pod: bu})
	if res.Admit || res.Message != "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. " {
		t.Fatalf("recreation under pressure = %+v", res)
	}
	s.available(500 * mi)
	c.step(2 * time.Second)
	if _, err := r.pass(m, nil); err != nil {
		t.Fatal(err)
	}
	if res := m.Admit(&Attributes{Pod: bu}); !res.Admit {
		t.Fatalf("recreation without pressure refused: %+v", res)
	}
	if m.isEvicted(bu.UID) {
		t.Fatal("guard kept after the pressure ended")
	}
}

// TestAdmitDoesNotMoveEvictionTiming steps a clock through a soft
// threshold's grace period, once with passes only and once with admissions
// between the passes (and with the pressure changing in between, which
// Admit must not see either): the evictions come at the same times.
func TestAdmitDoesNotMoveEvictionTiming(t *testing.T) {
	cfg := func(t *testing.T) Config {
		return Config{
			Thresholds: thresholds(t, pressure.ThresholdConfig{
				Soft:            map[string]string{"memory.available": "300Mi"},
				SoftGracePeriod: map[string]string{"memory.available": "20s"},
			}),
			TransitionPeriod:  30 * time.Second,
			MaxPodGracePeriod: 5 * time.Second,
		}
	}
	// available memory at each pass, every 2 s: pressure from 4 s, a dip
	// out of it at 10-11 s (resets the grace timer), back in until 60 s
	avail := func(sec int) int64 {
		switch {
		case sec < 4, sec >= 10 && sec < 12, sec >= 60:
			return 500 * mi
		}
		return 250 * mi
	}
	tests := []struct {
		name string
		// admits is how many admissions run between two passes, spread
		// over the 2 s; before each the sample changes to a value the
		// passes never see
		admits int
	}{
		{"passes only", 0},
		{"one admission between passes", 1},
		{"ten admissions between passes", 10},
	}
	var want []time.Duration
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, r, c := &fakeSampler{}, &recorder{}, newClock()
			start := c.now()
			m := newManager(t, cfg(t), s, r, c)
			var pods []*pod.Pod
			for i := range 5 {
				p := mkPod("p"+strconv.Itoa(i), pod.BestEffort, 0, false, false, true)
				pods = append(pods, p)
			}
			var got []time.Duration
			for sec := 0; sec < 90; sec += 2 {
				s.available(avail(sec))
				e, err := r.pass(m, pods)
				if err != nil {
					t.Fatal(err)
				}
				if e != nil {
					got = append(got, c.now().Sub(start))
					pods = slices.DeleteFunc(pods, func(p *pod.Pod) bool { return p == e.Pod })
				}
				for i := range tt.admits {
					c.t = start.Add(time.Duration(sec)*time.Second + time.Duration(i+1)*2*time.Second/time.Duration(tt.admits+1))
					s.available(int64((i+1)%2) * 900 * mi) // never sampled by Admit
					m.Admit(&Attributes{Pod: mkPod("new", pod.BestEffort, 0, false, false, true)})
				}
				c.t = start.Add(time.Duration(sec+2) * time.Second)
			}
			if len(got) == 0 {
				t.Fatal("no eviction at all")
			}
			if want == nil {
				want = got
				t.Logf("eviction times: %v", got)
				return
			}
			if !slices.Equal(got, want) {
				t.Fatalf("eviction times = %v, want %v (as without admissions)", got, want)
			}
		})
	}
}

// TestEvictionDecisionAsKubelet: the grace period and message of an
// eviction, as pkg/kubelet/eviction/eviction_manager.go synchronize and
// helpers.go evictionMessage/getThresholdMetInfo give them.
func TestEvictionDecisionAsKubelet(t *testing.T) {
	const gi = 1 << 30
	tests := []struct {
		name      string
		cfg       pressure.ThresholdConfig
		maxGrace  time.Duration
		available int64
		wantHard  bool
		wantGrace time.Duration
		wantMsg   string
	}{
		{"hard quantity", pressure.ThresholdConfig{Hard: map[string]string{"memory.available": "1Gi"}}, 30 * time.Second, 512 * mi,
			true, time.Second, "The node was low on resource: memory. Threshold quantity: 1Gi, available: 512Mi. "},
		// GetThresholdQuantity: float32 percentage of the capacity, BinarySI bytes
		{"hard percentage printed in bytes", pressure.ThresholdConfig{Hard: map[string]string{"memory.available": "10%"}}, 0, 100 * mi,
			true, time.Second, "The node was low on resource: memory. Threshold quantity: 429496736, available: 100Mi. "},
		{"soft uses the maximum pod grace period", pressure.ThresholdConfig{Soft: map[string]string{"memory.available": "1Gi"},
			SoftGracePeriod: map[string]string{"memory.available": "1s"}}, 30 * time.Second, 512 * mi,
			false, 30 * time.Second, "The node was low on resource: memory. Threshold quantity: 1Gi, available: 512Mi. "},
		// isHardEvictionThreshold: GracePeriod == 0
		{"soft with 0s grace is hard", pressure.ThresholdConfig{Soft: map[string]string{"memory.available": "1Gi"},
			SoftGracePeriod: map[string]string{"memory.available": "0s"}}, 30 * time.Second, 512 * mi,
			true, time.Second, "The node was low on resource: memory. Threshold quantity: 1Gi, available: 512Mi. "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, r, c := &fakeSampler{}, &recorder{}, newClock()
			s.node = pressure.NodeSample{CapacityBytes: 4 * gi, WorkingSetBytes: 4*gi - tt.available, AvailableBytes: tt.available}
			m := newManager(t, Config{Thresholds: thresholds(t, tt.cfg), MaxPodGracePeriod: tt.maxGrace, HardGracePeriod: time.Second}, s, r, c)
			p := mkPod("a", pod.BestEffort, 0, false, false, true)
			var e *Eviction
			for range 3 { // past a soft grace period
				var err error
				if e, err = synchronize(m, []*pod.Pod{p}); err != nil {
					t.Fatal(err)
				}
				if e != nil {
					break
				}
				c.step(2 * time.Second)
			}
			if e == nil {
				t.Fatal("no eviction")
			}
			if e.Hard != tt.wantHard || e.Grace != tt.wantGrace || e.Message != tt.wantMsg {
				t.Fatalf("eviction hard %v grace %v message %q; want %v %v %q", e.Hard, e.Grace, e.Message, tt.wantHard, tt.wantGrace, tt.wantMsg)
			}
			// the pod's terminationGracePeriodSeconds lowers a soft grace only
			if g := e.PodGrace(5*time.Second, true); (tt.wantHard && g != tt.wantGrace) || (!tt.wantHard && g != 5*time.Second) {
				t.Fatalf("PodGrace(5s) = %v", g)
			}
			if g := e.PodGrace(0, false); g != tt.wantGrace {
				t.Fatalf("PodGrace(unknown) = %v, want %v", g, tt.wantGrace)
			}
		})
	}
}

// TestAPIInputs: what only the API says changes admission and ranking as
// in the kubelet: a BestEffort pod tolerating the memory-pressure taint is
// admitted under MemoryPressure; a Burstable pod below its API memory
// request ranks after a BestEffort one that uses less memory.
func TestAPIInputs(t *testing.T) {
	s, r, c := &fakeSampler{}, &recorder{}, newClock()
	s.available(50 * mi)
	m := newManager(t, Config{Thresholds: thresholds(t, pressure.ThresholdConfig{Hard: map[string]string{"memory.available": "100Mi"}})}, s, r, c)
	be := mkPod("be", pod.BestEffort, 0, false, false, true)
	bu := mkPod("bu", pod.Burstable, 0, false, false, true)
	bu.MemoryRequestBytes, bu.HasMemoryRequest = 500*mi, true
	s.pods = map[string]pressure.PodStats{
		be.CgroupParent: {HasMemory: true, WorkingSetBytes: 10 * mi},
		bu.CgroupParent: {HasMemory: true, WorkingSetBytes: 400 * mi}, // no request visible in the cgroup
	}
	e, err := synchronize(m, []*pod.Pod{bu, be})
	if err != nil || e == nil || e.Pod.Name != "be" {
		t.Fatalf("victim %v, %v; want be (bu is below its request)", e, err)
	}
	tol := mkPod("tol", pod.BestEffort, 0, false, false, true)
	if m.Admit(&Attributes{Pod: tol}).Admit {
		t.Fatal("BestEffort pod admitted under MemoryPressure")
	}
	tol.ToleratesMemoryPressure = true
	if res := m.Admit(&Attributes{Pod: tol}); !res.Admit {
		t.Fatalf("tolerating BestEffort pod refused: %+v", res)
	}
}

// TestStatsErrorIsStale: a failed sample keeps the last good one's time
// (status shows it as stale, not current) and status shows the conditions
// admission acts on under the onStatsError policy.
func TestStatsErrorIsStale(t *testing.T) {
	s, r, c := &fakeSampler{}, &recorder{}, newClock()
	s.available(50 * mi)
	m := newManager(t, Config{Thresholds: thresholds(t, pressure.ThresholdConfig{Hard: map[string]string{"memory.available": "100Mi"}})}, s, r, c)
	if _, err := synchronize(m, nil); err != nil {
		t.Fatal(err)
	}
	good := m.Snapshot().SampledAt
	c.step(10 * time.Second)
	s.nodeErr = errors.New("read meminfo: stats read timed out")
	if _, err := synchronize(m, nil); err == nil {
		t.Fatal("no error")
	}
	snap := m.Snapshot()
	if !snap.SampledAt.Equal(good) || snap.StatsError == "" {
		t.Fatalf("sampled at %v (good sample at %v), stats error %q", snap.SampledAt, good, snap.StatsError)
	}
	if len(snap.Conditions) != 0 { // onStatsError admit: no condition acts
		t.Fatalf("conditions under stats error with admit = %v, want none", snap.Conditions)
	}
}

// TestMissingSignalShown: a threshold whose signal the sample lacks
// without an error (a PSI file gone reads as PSI disabled) cannot act, and
// status says so (never in silence: an operator must see that a threshold
// is idle); once the signal is
// back, it does not.
func TestMissingSignalShown(t *testing.T) {
	s, r, c := &fakeSampler{}, &recorder{}, newClock()
	s.available(500 * mi) // no PSI in the sample
	m := newManager(t, Config{Thresholds: thresholds(t, pressure.ThresholdConfig{
		Hard: map[string]string{"memory.available": "100Mi", "memory.pressure.some.avg10": "20%"}})}, s, r, c)
	if _, err := synchronize(m, nil); err != nil {
		t.Fatal(err)
	}
	errs := m.Snapshot().SignalErrors
	if len(errs) != 1 || !strings.Contains(errs[0], "memory.pressure.some.avg10 missing") {
		t.Fatalf("signal errors without PSI = %q, want the PSI signal named", errs)
	}
	s.node.HasPSI = true
	c.step(10 * time.Second)
	if _, err := synchronize(m, nil); err != nil {
		t.Fatal(err)
	}
	if errs := m.Snapshot().SignalErrors; len(errs) != 0 {
		t.Fatalf("signal errors with PSI back = %q, want none", errs)
	}
}

// TestOnPressure: OnPressure is told of each change of the view of memory
// pressure (the API's node condition and taint follow it), not of every
// pass, and nothing before the first good sample; it ends after the
// transition period.
func TestOnPressure(t *testing.T) {
	s, c := &fakeSampler{}, newClock()
	var told []Pressure
	m, err := New(Config{
		Thresholds: thresholds(t, pressure.ThresholdConfig{
			Hard:            map[string]string{"memory.available": "100Mi"},
			Soft:            map[string]string{"memory.available": "300Mi"},
			SoftGracePeriod: map[string]string{"memory.available": "30s"},
		}),
		TransitionPeriod: time.Minute,
	}, Options{Sampler: s, Now: c.now, Log: quietLog(), OnPressure: func(p Pressure) { told = append(told, p) }})
	if err != nil {
		t.Fatal(err)
	}
	s.nodeErr = errors.New("unreadable")
	m.Observe()
	s.nodeErr = nil
	steps := []struct {
		available int64
		step      time.Duration
		want      int
	}{
		{500 * mi, 0, 1},                 // calm: told once
		{500 * mi, 10 * time.Second, 1},  // unchanged
		{250 * mi, 0, 2},                 // soft met, pending
		{250 * mi, 10 * time.Second, 2},  // unchanged
		{50 * mi, 0, 3},                  // hard met too
		{500 * mi, 0, 4},                 // calm, condition held: no threshold listed
		{500 * mi, 30 * time.Second, 4},  // within the transition period
		{500 * mi, 31 * time.Second, 5},  // the transition period over
		{500 * mi, 300 * time.Second, 5}, // unchanged
	}
	for i, st := range steps {
		c.step(st.step)
		s.available(st.available)
		m.Observe()
		if len(told) != st.want {
			t.Fatalf("step %d: told %d times, want %d: %+v", i, len(told), st.want, told)
		}
	}
	want := []Pressure{
		{},
		{MemoryPressure: true, Thresholds: []string{"soft memory.available<300Mi (grace 30s)"}},
		{MemoryPressure: true, Thresholds: []string{"hard memory.available<100Mi", "soft memory.available<300Mi (grace 30s)"}},
		{MemoryPressure: true},
		{},
	}
	for i := range want {
		if told[i].MemoryPressure != want[i].MemoryPressure || len(told[i].Thresholds) != len(want[i].Thresholds) {
			t.Errorf("told[%d] = %+v, want %+v", i, told[i], want[i])
		}
	}
}

// synchronize is a pass with nothing under way and nothing held back:
// only the choice among active.
func synchronize(m *Manager, active []*pod.Pod) (*Eviction, error) {
	a := m.Synchronize(Pass{Active: active})
	return a.Evict, a.Err
}
