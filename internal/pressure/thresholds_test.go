package pressure

import (
	"math"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

func TestParseThresholds(t *testing.T) {
	tests := []struct {
		name    string
		cfg     ThresholdConfig
		want    []string // Threshold.String() in order
		wantErr string   // substring; "" means success
	}{
		{
			name: "design example",
			cfg: ThresholdConfig{
				Hard:            map[string]string{"memory.available": "100Mi", "memory.pressure.full.avg10": "40%"},
				Soft:            map[string]string{"memory.available": "300Mi", "memory.pressure.some.avg10": "20%"},
				SoftGracePeriod: map[string]string{"memory.available": "30s", "memory.pressure.some.avg10": "20s"},
				MinimumReclaim:  map[string]string{"memory.available": "200Mi"},
			},
			want: []string{
				"hard memory.available<100Mi min-reclaim=200Mi",
				"hard memory.pressure.full.avg10>40%",
				"soft memory.available<300Mi grace=30s min-reclaim=200Mi",
				"soft memory.pressure.some.avg10>20% grace=20s",
			},
		},
		{
			// pkg/kubelet/eviction/helpers.go isHardEvictionThreshold:
			// a threshold is hard when its grace period is 0
			name: "soft with a 0s grace period is hard",
			cfg: ThresholdConfig{
				Soft:            map[string]string{"memory.available": "300Mi"},
				SoftGracePeriod: map[string]string{"memory.available": "0s"},
			},
			want: []string{"hard memory.available<300Mi"},
		},
		{
			name: "percent of capacity and allocatable",
			cfg:  ThresholdConfig{Hard: map[string]string{"memory.available": "10%", "allocatableMemory.available": "5%"}},
			want: []string{"hard allocatableMemory.available<5%", "hard memory.available<10%"},
		},
		{
			name: "0% and 100% disable a threshold as in the kubelet",
			cfg:  ThresholdConfig{Hard: map[string]string{"memory.available": "0%", "memory.pressure.some.avg60": "100%"}},
			want: nil,
		},
		{name: "unknown signal", cfg: ThresholdConfig{Hard: map[string]string{"nodefs.available": "10%"}}, wantErr: "evictionHard[nodefs.available]: unsupported eviction signal"},
		{name: "bad quantity", cfg: ThresholdConfig{Hard: map[string]string{"memory.available": "100Mx"}}, wantErr: "evictionHard[memory.available]: quantities must match"},
		{name: "bad quantity names the value and the forms", cfg: ThresholdConfig{Hard: map[string]string{"memory.available": "lots"}}, wantErr: `(want a quantity such as "100Mi" or a percentage such as "10%", got "lots")`},
		{name: "bad reclaim quantity", cfg: ThresholdConfig{Hard: map[string]string{"memory.available": "1Gi"}, MinimumReclaim: map[string]string{"memory.available": "some"}}, wantErr: `got "some")`},
		{name: "zero quantity", cfg: ThresholdConfig{Hard: map[string]string{"memory.available": "0"}}, wantErr: "evictionHard[memory.available]: eviction threshold must be positive"},
		{name: "negative quantity", cfg: ThresholdConfig{Soft: map[string]string{"memory.available": "-1Gi"}}, wantErr: "evictionSoft[memory.available]: eviction threshold must be positive"},
		{name: "percent above 100", cfg: ThresholdConfig{Hard: map[string]string{"memory.available": "101%"}}, wantErr: "must be <= 100%"},
		{name: "negative percent", cfg: ThresholdConfig{Hard: map[string]string{"memory.available": "-5%"}}, wantErr: "must be >= 0%"},
		{name: "NaN percent", cfg: ThresholdConfig{Hard: map[string]string{"memory.available": "NaN%"}}, wantErr: "invalid percentage"},
		{name: "PSI needs a percentage", cfg: ThresholdConfig{Hard: map[string]string{"memory.pressure.some.avg10": "40"}}, wantErr: "evictionHard[memory.pressure.some.avg10]: pressure signals take a percentage"},
		{
			name:    "soft without grace period",
			cfg:     ThresholdConfig{Soft: map[string]string{"memory.available": "300Mi"}},
			wantErr: "evictionSoftGracePeriod[memory.available]: grace period must be specified",
		},
		{
			name: "bad grace period",
			cfg: ThresholdConfig{Soft: map[string]string{"memory.available": "300Mi"},
				SoftGracePeriod: map[string]string{"memory.available": "soon"}},
			wantErr: "evictionSoftGracePeriod[memory.available]: time: invalid duration",
		},
		{
			name: "negative grace period",
			cfg: ThresholdConfig{Soft: map[string]string{"memory.available": "300Mi"},
				SoftGracePeriod: map[string]string{"memory.available": "-1s"}},
			wantErr: "evictionSoftGracePeriod[memory.available]: must be a positive value",
		},
		{name: "grace for unknown signal", cfg: ThresholdConfig{SoftGracePeriod: map[string]string{"imagefs.available": "1s"}}, wantErr: "evictionSoftGracePeriod[imagefs.available]: unsupported"},
		{name: "negative reclaim", cfg: ThresholdConfig{MinimumReclaim: map[string]string{"memory.available": "-1Mi"}}, wantErr: "evictionMinimumReclaim[memory.available]: negative reclaim"},
		{name: "reclaim above 100%", cfg: ThresholdConfig{MinimumReclaim: map[string]string{"memory.available": "120%"}}, wantErr: "evictionMinimumReclaim[memory.available]: minimum reclaim percentage must be <= 100%"},
		{name: "PSI reclaim as quantity", cfg: ThresholdConfig{MinimumReclaim: map[string]string{"memory.pressure.full.avg10": "1Mi"}}, wantErr: "evictionMinimumReclaim[memory.pressure.full.avg10]: pressure signals"},
		{name: "negative transition", cfg: ThresholdConfig{TransitionPeriod: -time.Second}, wantErr: "evictionPressureTransitionPeriod"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseThresholds(tc.cfg)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseThresholds error = %v; want containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseThresholds: %v", err)
			}
			var gotS []string
			for _, th := range got {
				gotS = append(gotS, th.String())
			}
			if strings.Join(gotS, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(gotS, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestThresholdValues(t *testing.T) {
	th, err := ParseThresholds(ThresholdConfig{Hard: map[string]string{"memory.available": "10%", "allocatableMemory.available": "1Gi"}})
	if err != nil {
		t.Fatal(err)
	}
	// The kubelet computes percentages in float32: 10% of 8 GiB is 858993472,
	// not 858993459.
	tests := []struct {
		sig  Signal
		want int64
	}{
		{SignalAllocatableMemoryAvailable, gi},
		{SignalMemoryAvailable, 858993472},
	}
	for i, tc := range tests {
		if th[i].Signal != tc.sig || th[i].Value.Bytes(8*gi) != tc.want {
			t.Errorf("threshold %d: %s resolves to %d, want %s %d", i, th[i].Signal, th[i].Value.Bytes(8*gi), tc.sig, tc.want)
		}
	}
}

func TestThresholdLimit(t *testing.T) {
	q := resource.MustParse("100Mi")
	tests := []struct {
		name   string
		t      Threshold
		want   float64
		wantOK bool
	}{
		{"quantity", Threshold{Signal: SignalMemoryAvailable, Value: Value{Quantity: &q}}, 100 << 20, true},
		{"percent of unknown capacity", Threshold{Signal: SignalMemoryAvailable, Value: Value{Percentage: 0.1}}, 0, false},
		{"psi", Threshold{Signal: SignalPSISomeAvg10, Value: Value{Percentage: 0.2}}, 20, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.t.Limit(Observation{})
			if ok != tt.wantOK || math.Abs(got-tt.want) > 1e-6 {
				t.Errorf("got %v, %v; want %v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}
