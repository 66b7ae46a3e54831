package benchutil

import (
	"os"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	tests := []struct {
		name string
		p    float64
		want time.Duration
	}{
		{"p50", 50, 5},
		{"p99", 99, 10},
		{"p10", 10, 1},
		{"p0 clamps", 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(ds, tt.p); got != tt.want {
				t.Errorf("percentile(%v) = %v, want %v", tt.p, got, tt.want)
			}
		})
	}
	if Percentile(nil, 50) != 0 {
		t.Error("percentile of no samples should be 0")
	}
}

func TestReadProcStatsSelf(t *testing.T) {
	ps, err := ReadProcStats(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if ps.RSSKiB <= 0 || ps.HWMKiB < ps.RSSKiB {
		t.Errorf("VmRSS = %d KiB, VmHWM = %d KiB", ps.RSSKiB, ps.HWMKiB)
	}
	if _, err := ReadProcStats(-1); err == nil {
		t.Error("no error for a missing pid")
	}
}
