package pressure

import (
	"strings"
	"testing"
	"time"
)

// step is one evaluation: at t0+at, with memory.available = avail (bytes of
// an 8 GiB node) and PSI some avg10 = some; want* are Met/Pending strings
// joined by "; " and whether MemoryPressure is reported.
type step struct {
	at           time.Duration
	avail        int64
	some         float64
	wantMet      string
	wantPending  string
	wantPressure bool
}

func obsFor(avail int64, some float64) map[Signal]Observation {
	return map[Signal]Observation{
		SignalMemoryAvailable: {Signal: SignalMemoryAvailable, Available: avail, Capacity: 8 * gi},
		SignalPSISomeAvg10:    {Signal: SignalPSISomeAvg10, Percent: some},
	}
}

func joinMet(ms []Met) string {
	var s []string
	for _, m := range ms {
		s = append(s, m.String())
	}
	return strings.Join(s, "; ")
}

func TestEvaluator(t *testing.T) {
	tests := []struct {
		name       string
		cfg        ThresholdConfig
		transition time.Duration
		steps      []step
	}{
		{
			name: "hard threshold acts at once and recovers",
			cfg:  ThresholdConfig{Hard: map[string]string{"memory.available": "100Mi"}},
			steps: []step{
				{at: 0, avail: 500 * mi},
				{at: 10 * time.Second, avail: 80 * mi, wantMet: "memory.available 80Mi < 100Mi", wantPressure: true},
				{at: 20 * time.Second, avail: 100 * mi, wantPressure: false},
			},
		},
		{
			name: "hard PSI threshold",
			cfg:  ThresholdConfig{Hard: map[string]string{"memory.pressure.some.avg10": "40%"}},
			steps: []step{
				{at: 0, avail: gi, some: 40},
				{at: time.Second, avail: gi, some: 52.5, wantMet: "memory.pressure.some.avg10 52.5% > 40%", wantPressure: true},
				{at: 2 * time.Second, avail: gi, some: 39},
			},
		},
		{
			name: "soft threshold before and after grace",
			cfg: ThresholdConfig{
				Soft:            map[string]string{"memory.available": "300Mi"},
				SoftGracePeriod: map[string]string{"memory.available": "30s"},
			},
			steps: []step{
				{at: 0, avail: 200 * mi, wantPending: "memory.available 200Mi < 300Mi", wantPressure: true},
				{at: 29 * time.Second, avail: 250 * mi, wantPending: "memory.available 250Mi < 300Mi", wantPressure: true},
				{at: 30 * time.Second, avail: 250 * mi, wantMet: "memory.available 250Mi < 300Mi", wantPressure: true},
			},
		},
		{
			name: "soft threshold grace restarts when not continuously met",
			cfg: ThresholdConfig{
				Soft:            map[string]string{"memory.available": "300Mi"},
				SoftGracePeriod: map[string]string{"memory.available": "30s"},
			},
			steps: []step{
				{at: 0, avail: 200 * mi, wantPending: "memory.available 200Mi < 300Mi", wantPressure: true},
				{at: 20 * time.Second, avail: 400 * mi, wantPressure: false},
				{at: 40 * time.Second, avail: 200 * mi, wantPending: "memory.available 200Mi < 300Mi", wantPressure: true},
				{at: 70 * time.Second, avail: 200 * mi, wantMet: "memory.available 200Mi < 300Mi", wantPressure: true},
			},
		},
		{
			name: "min-reclaim keeps an acting threshold until threshold + reclaim",
			cfg: ThresholdConfig{
				Hard:           map[string]string{"memory.available": "100Mi"},
				MinimumReclaim: map[string]string{"memory.available": "200Mi"},
			},
			steps: []step{
				{at: 0, avail: 150 * mi},
				{at: 10 * time.Second, avail: 90 * mi, wantMet: "memory.available 90Mi < 100Mi", wantPressure: true},
				{at: 20 * time.Second, avail: 250 * mi, wantMet: "memory.available 250Mi < 300Mi (threshold 100Mi + min-reclaim 200Mi)", wantPressure: true},
				{at: 30 * time.Second, avail: 299 * mi, wantMet: "memory.available 299Mi < 300Mi (threshold 100Mi + min-reclaim 200Mi)", wantPressure: true},
				{at: 40 * time.Second, avail: 300 * mi},
				// Once resolved, min-reclaim no longer applies.
				{at: 50 * time.Second, avail: 250 * mi},
			},
		},
		{
			name: "min-reclaim does not hold a pending soft threshold",
			cfg: ThresholdConfig{
				Soft:            map[string]string{"memory.available": "100Mi"},
				SoftGracePeriod: map[string]string{"memory.available": "1m"},
				MinimumReclaim:  map[string]string{"memory.available": "200Mi"},
			},
			steps: []step{
				{at: 0, avail: 90 * mi, wantPending: "memory.available 90Mi < 100Mi", wantPressure: true},
				{at: 10 * time.Second, avail: 150 * mi},
			},
		},
		{
			name:       "transition period keeps the condition, then recovery",
			cfg:        ThresholdConfig{Hard: map[string]string{"memory.available": "10%"}},
			transition: 5 * time.Minute,
			steps: []step{
				{at: 0, avail: 800 * mi, wantMet: "memory.available 800Mi < 858993472", wantPressure: true},
				{at: 10 * time.Second, avail: 2 * gi, wantPressure: true},
				{at: 4*time.Minute + 59*time.Second, avail: 2 * gi, wantPressure: true},
				{at: 5 * time.Minute, avail: 2 * gi, wantPressure: false},
			},
		},
		{
			name:       "met again restarts the transition period",
			cfg:        ThresholdConfig{Hard: map[string]string{"memory.pressure.some.avg10": "20%"}},
			transition: time.Minute,
			steps: []step{
				{at: 0, avail: gi, some: 30, wantMet: "memory.pressure.some.avg10 30% > 20%", wantPressure: true},
				{at: 50 * time.Second, avail: gi, some: 21, wantMet: "memory.pressure.some.avg10 21% > 20%", wantPressure: true},
				{at: 100 * time.Second, avail: gi, some: 5, wantPressure: true},
				{at: 110 * time.Second, avail: gi, some: 5, wantPressure: false},
			},
		},
	}
	t0 := time.Unix(1_700_000_000, 0)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			th, err := ParseThresholds(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			e := NewEvaluator(th, tc.transition)
			for i, st := range tc.steps {
				r := e.Evaluate(t0.Add(st.at), obsFor(st.avail, st.some))
				gotPressure := len(r.Conditions) == 1 && r.Conditions[0] == ConditionMemoryPressure
				if joinMet(r.Met) != st.wantMet || joinMet(r.Pending) != st.wantPending || gotPressure != st.wantPressure {
					t.Errorf("step %d (+%s): met %q pending %q conditions %v\nwant met %q pending %q pressure %v",
						i, st.at, joinMet(r.Met), joinMet(r.Pending), r.Conditions, st.wantMet, st.wantPending, st.wantPressure)
				}
			}
		})
	}
}

func TestEvaluatorMissingSignal(t *testing.T) {
	th, err := ParseThresholds(ThresholdConfig{Hard: map[string]string{"allocatableMemory.available": "1Gi"}})
	if err != nil {
		t.Fatal(err)
	}
	r := NewEvaluator(th, time.Minute).Evaluate(time.Unix(0, 0), obsFor(10*mi, 90))
	if len(r.Met)+len(r.Pending)+len(r.Conditions) != 0 {
		t.Errorf("absent signal met something: %+v", r)
	}
}

// TestEvaluatorUpdateKeepsHistory: a reload with unchanged thresholds keeps
// the condition within its transition period and a soft threshold's grace
// timer; a changed threshold starts over.
func TestEvaluatorUpdateKeepsHistory(t *testing.T) {
	parse := func(soft, grace string) []Threshold {
		ts, err := ParseThresholds(ThresholdConfig{Soft: map[string]string{"memory.available": soft},
			SoftGracePeriod: map[string]string{"memory.available": grace}})
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}
	t0 := time.Unix(1_700_000_000, 0)
	obs := func(avail int64) map[Signal]Observation {
		return map[Signal]Observation{SignalMemoryAvailable: {Signal: SignalMemoryAvailable, Available: avail, Capacity: 4 << 30}}
	}
	e := NewEvaluator(parse("1Gi", "30s"), time.Minute)
	e.Evaluate(t0, obs(512<<20)) // met, grace running
	// unchanged reload 20 s in: the grace period is not restarted
	if added, removed := e.Update(parse("1Gi", "30s"), time.Minute); len(added)+len(removed) != 0 {
		t.Fatalf("unchanged reload: added %v removed %v", added, removed)
	}
	if r := e.Evaluate(t0.Add(31*time.Second), obs(512<<20)); len(r.Met) != 1 {
		t.Fatalf("31s after first met, after an unchanged reload: met %v, want the threshold acting", r.Met)
	}
	// pressure over; a reload within the transition period keeps the condition
	e.Evaluate(t0.Add(40*time.Second), obs(3<<30))
	e.Update(parse("1Gi", "30s"), time.Minute)
	if r := e.Evaluate(t0.Add(50*time.Second), obs(3<<30)); len(r.Conditions) != 1 {
		t.Fatal("MemoryPressure dropped by a reload within the transition period")
	}
	// a changed threshold starts its grace period again
	e.Evaluate(t0.Add(60*time.Second), obs(512<<20))
	added, removed := e.Update(parse("2Gi", "30s"), time.Minute)
	if len(added) != 1 || len(removed) != 1 {
		t.Fatalf("changed reload: added %v removed %v", added, removed)
	}
	if r := e.Evaluate(t0.Add(61*time.Second), obs(512<<20)); len(r.Met) != 0 || len(r.Pending) != 1 {
		t.Fatalf("changed threshold: met %v pending %v, want pending", r.Met, r.Pending)
	}
}
