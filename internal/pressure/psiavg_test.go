package pressure

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func TestPSIAverage(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type step struct {
		after      time.Duration // since t0
		kernel     PSI
		want10     float64
		want60     float64
		wantAvg300 float64
	}
	e := func(d time.Duration, p time.Duration) float64 { return 1 - math.Exp(-d.Seconds()/p.Seconds()) }
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "first reading is the kernel's",
			steps: []step{
				{kernel: PSI{Avg10: 3, Avg60: 1, Avg300: 0.5, Total: 7}, want10: 3, want60: 1, wantAvg300: 0.5},
			},
		},
		{
			name: "a stall the kernel has not averaged yet moves avg10 at once",
			steps: []step{
				{kernel: PSI{Total: 1_000_000}},
				// 400 ms of stall in 500 ms: 80% over half a second.
				{after: 500 * time.Millisecond, kernel: PSI{Total: 1_400_000},
					want10: 80 * e(500*time.Millisecond, 10*time.Second), want60: 80 * e(500*time.Millisecond, time.Minute)},
			},
		},
		{
			name: "readings closer than the minimum step do not move it",
			steps: []step{
				{kernel: PSI{Total: 0}},
				{after: 30 * time.Millisecond, kernel: PSI{Total: 30_000}},
				// The 30 ms reading was skipped: the share is over the whole second.
				{after: time.Second, kernel: PSI{Total: 500_000},
					want10: 50 * e(time.Second, 10*time.Second), want60: 50 * e(time.Second, time.Minute)},
			},
		},
		{
			name: "no stall decays it",
			steps: []step{
				{kernel: PSI{Avg10: 40, Avg60: 40, Total: 9}},
				{after: 10 * time.Second, kernel: PSI{Avg10: 14.7, Avg60: 33.8, Total: 9},
					want10: math.Max(14.7, 40*math.Exp(-1)), want60: math.Max(33.8, 40*math.Exp(-10.0/60))},
			},
		},
		{
			name: "the kernel's figure wins when it is higher",
			steps: []step{
				{kernel: PSI{Total: 0}},
				{after: 2 * time.Second, kernel: PSI{Avg10: 30, Avg60: 5, Total: 100_000},
					want10: 30, want60: 5},
			},
		},
		{
			name: "a counter that went back reseeds from the kernel",
			steps: []step{
				{kernel: PSI{Total: 5_000_000}},
				{after: time.Second, kernel: PSI{Avg10: 1, Avg60: 2, Total: 10}, want10: 1, want60: 2},
				{after: 2 * time.Second, kernel: PSI{Avg10: 1, Avg60: 2, Total: 10},
					want10: 1 * math.Exp(-0.1), want60: 2 * math.Exp(-1.0/60)},
			},
		},
		{
			name: "the share is capped at 100%",
			steps: []step{
				{kernel: PSI{Total: 0}},
				{after: time.Second, kernel: PSI{Total: 3_000_000},
					want10: 100 * e(time.Second, 10*time.Second), want60: 100 * e(time.Second, time.Minute)},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a psiAverage
			for i, s := range tt.steps {
				got := a.update(s.kernel, t0.Add(s.after))
				if math.Abs(got.Avg10-max(s.want10, s.kernel.Avg10)) > 1e-9 ||
					math.Abs(got.Avg60-max(s.want60, s.kernel.Avg60)) > 1e-9 {
					t.Errorf("step %d: avg10 %.6f avg60 %.6f, want %.6f %.6f", i, got.Avg10, got.Avg60,
						max(s.want10, s.kernel.Avg10), max(s.want60, s.kernel.Avg60))
				}
				if got.Avg300 != s.kernel.Avg300 || got.Total != s.kernel.Total {
					t.Errorf("step %d: avg300/total changed: %+v, kernel %+v", i, got, s.kernel)
				}
			}
		})
	}
}

// TestPSIAverageMatchesKernel feeds readings at the kernel's own 2 s period:
// the estimate then equals the kernel's avg10 and avg60 recurrence.
func TestPSIAverageMatchesKernel(t *testing.T) {
	shares := []float64{0, 50, 100, 100, 20, 0, 0, 75, 10, 0}
	var a psiAverage
	now := time.Unix(0, 0)
	var total uint64
	var k10, k60 float64
	a.update(PSI{Total: total}, now)
	for i, share := range shares {
		now = now.Add(2 * time.Second)
		total += uint64(share / 100 * 2e6)
		k10 = k10*math.Exp(-0.2) + share*(1-math.Exp(-0.2))
		k60 = k60*math.Exp(-2.0/60) + share*(1-math.Exp(-2.0/60))
		// Feed the kernel's figures slightly low so the estimate is what is compared.
		got := a.update(PSI{Avg10: k10 * 0.99, Avg60: k60 * 0.99, Total: total}, now)
		if math.Abs(got.Avg10-k10) > 1e-6 || math.Abs(got.Avg60-k60) > 1e-6 {
			t.Fatalf("period %d: estimate %.4f/%.4f, kernel recurrence %.4f/%.4f", i, got.Avg10, got.Avg60, k10, k60)
		}
	}
}

// TestSamplerFreshPSI checks that the sampler's pods and node PSI come from
// the estimate: a pressure file whose total moved while its averages did not
// is reported with the new stall.
func TestSamplerFreshPSI(t *testing.T) {
	root := copyTree(t, "v2-idle")
	now := time.Unix(1000, 0)
	s, err := NewSampler(SamplerConfig{
		CgroupRoot: filepath.Join(root, "cgroup"),
		ProcRoot:   filepath.Join(root, "proc"),
		PodsCgroup: "/kubepods.slice",
		Now:        func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	write := func(p string, total int) {
		t.Helper()
		b := []byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=" + itoa(total) +
			"\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pods := filepath.Join(root, "cgroup", "kubepods.slice", "memory.pressure")
	node := filepath.Join(root, "proc", "pressure", "memory")
	write(pods, 1000)
	write(node, 1000)
	if _, err := s.Node(); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second)
	write(pods, 1000+600_000) // 60% of the last second
	write(node, 1000+300_000) // 30%
	n, err := s.Node()
	if err != nil {
		t.Fatal(err)
	}
	k := 1 - math.Exp(-0.1)
	if got, want := n.PodsSome.Avg10, 60*k; math.Abs(got-want) > 1e-9 {
		t.Errorf("pods some avg10 = %.4f, want %.4f", got, want)
	}
	if got, want := n.Some.Avg10, 30*k; math.Abs(got-want) > 1e-9 {
		t.Errorf("node some avg10 = %.4f, want %.4f", got, want)
	}
	if got := n.Observations()[SignalPSISomeAvg10].Percent; math.Abs(got-60*k) > 1e-9 {
		t.Errorf("observed %s = %.4f, want the pods cgroup's %.4f", SignalPSISomeAvg10, got, 60*k)
	}
	if n.PodsFull.Avg10 != 0 {
		t.Errorf("pods full avg10 = %v, want 0 (no full stall)", n.PodsFull.Avg10)
	}
}

func itoa(v int) string { return strconv.Itoa(v) }
