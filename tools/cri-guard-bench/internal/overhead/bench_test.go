package overhead

import (
	"io"
	"strings"
	"testing"
	"time"
)

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
		{name: "compare-core needs a binary", args: []string{"--compare-core"}, wantErr: "--compare-core"},
		{name: "compare-core excludes compare-env", args: []string{"--compare-core", "--cri-guard-binary", "/y", "--compare-env", "A=1"}, wantErr: "--compare-core"},
		{name: "compare-core", args: []string{"--compare-core", "--cri-guard-binary", "/y"}},
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

func TestParseCPUTimes(t *testing.T) {
	tests := []struct {
		name      string
		stat      string
		want      cpuTimes
		wantError bool
	}{
		{name: "kernel line", stat: "cpu  100 5 50 800 20 1 2 3 7 0\ncpu0 1 2 3 4 5 6 7 8\n", want: cpuTimes{idle: 820, total: 981}},
		{name: "per-cpu line first", stat: "cpu0 1 2 3 4 5 6 7 8\n", wantError: true},
		{name: "too few fields", stat: "cpu 1 2 3\n", wantError: true},
		{name: "garbage", stat: "cpu 1 2 x 4 5 6 7 8\n", wantError: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseCPUTimes(tt.stat)
			if (err != nil) != tt.wantError {
				t.Fatalf("err = %v, want error %v", err, tt.wantError)
			}
			if err == nil && got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
	busy := cpuTimes{idle: 820, total: 1000}.busyShareSince(cpuTimes{idle: 420, total: 500})
	if busy < 0.19 || busy > 0.21 {
		t.Fatalf("busy share = %v, want 0.2", busy)
	}
}

func TestReportOverFloor(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Microsecond
		}
		return out
	}
	r := results{
		latencies: []latency{
			{method: method{name: "Version", class: "tiny"}, samples: [][]time.Duration{ms(100, 100, 100), ms(300, 300, 300), ms(290, 290, 290)}},
			{method: method{name: "ListContainers", class: "list"}, samples: [][]time.Duration{ms(500, 500, 500), ms(800, 800, 800), ms(700, 700, 700)}},
			{method: method{name: "ListContainerStats", class: "stats"}, samples: [][]time.Duration{ms(9, 9, 9), ms(9, 9, 9), ms(9, 9, 9)}},
		},
		proxies: []*proxyResult{{label: "A", tput: []float64{90}}, {label: "B core", tput: []float64{100}}},
	}
	var b strings.Builder
	reportOverFloor(&b, r)
	out := b.String()
	for _, want := range []string{
		"Version  200  190  1.053  ≤1.10 ok",
		"ListContainers  300  200  1.500  ≤1.10 MISSED",
		"throughput over the floor's: 0.900",
	} {
		if !strings.Contains(strings.Join(strings.Fields(out), "  "), strings.Join(strings.Fields(want), "  ")) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "ListContainerStats") {
		t.Errorf("stats calls are not compared with the floor:\n%s", out)
	}
}
