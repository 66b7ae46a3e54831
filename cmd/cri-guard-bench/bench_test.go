package main

import (
	"io"
	"os"
	"strings"
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
			if got := percentile(ds, tt.p); got != tt.want {
				t.Errorf("percentile(%v) = %v, want %v", tt.p, got, tt.want)
			}
		})
	}
	if percentile(nil, 50) != 0 {
		t.Error("percentile of no samples should be 0")
	}
}

func TestReadProcStatsSelf(t *testing.T) {
	ps, err := readProcStats(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if ps.rssKiB <= 0 {
		t.Errorf("VmRSS = %d KiB", ps.rssKiB)
	}
	if _, err := readProcStats(-1); err == nil {
		t.Error("no error for a missing pid")
	}
}

func TestParseBenchFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "defaults"},
		{name: "exclusive proxy modes", args: []string{"--proxy-endpoint", "/x", "--cri-guard-binary", "/y"}, wantErr: "exclusive"},
		{name: "compare needs a child", args: []string{"--proxy-endpoint", "/x", "--compare-env", "A=1"}, wantErr: "--compare-env"},
		{name: "too few iterations", args: []string{"--iterations", "3"}, wantErr: "positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseBenchFlags(tt.args, io.Discard)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}
