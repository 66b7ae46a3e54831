package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCurrent: alerts_scrape_test.yaml is what the committed recordings
// generate (no file when none is recorded), so that it cannot drift from
// them or from alerts.yaml.
func TestCurrent(t *testing.T) {
	if err := run("..", "", true); err != nil {
		t.Fatal(err)
	}
}

// recordingText is a recording as the cluster recorder writes it: scrapes
// at t0 + at[i] seconds, body[i] their exposition ("" a failed scrape).
func recordingText(t0 int64, at []int64, body []string, marks map[string]int64) string {
	var b strings.Builder
	b.WriteString("# cri-guard scrape recording of TestX: target 127.0.0.1:19713, every 5s\n")
	for i := range at {
		for name, m := range marks {
			if m > at[max(i-1, 0)] && m <= at[i] {
				fmt.Fprintf(&b, "# mark %d %s\n", t0+m*1000-1, name)
			}
		}
		if body[i] == "" {
			fmt.Fprintf(&b, "# scrape %d error dial tcp 127.0.0.1:19713: connection refused\n", t0+at[i]*1000)
			continue
		}
		fmt.Fprintf(&b, "# scrape %d ok\n%s", t0+at[i]*1000, body[i])
	}
	return b.String()
}

const (
	expoHead = "# HELP cri_guard_evictions_total Pods stopped.\n# TYPE cri_guard_evictions_total counter\n"
	goLines  = "# HELP go_goroutines Goroutines.\n# TYPE go_goroutines gauge\ngo_goroutines 12\n"
)

func expo(evictions int) string {
	return goLines + expoHead + fmt.Sprintf("cri_guard_evictions_total{signal=\"memory.available\"} %d\n", evictions)
}

// TestResample: each point is the latest scrape of its interval; a series
// a scrape lacks is stale once, then missing; up follows the scrapes'
// success; a histogram is stored as its series.
func TestResample(t *testing.T) {
	hist := "# TYPE cri_guard_lat_seconds histogram\ncri_guard_lat_seconds_bucket{le=\"0.1\"} 1\ncri_guard_lat_seconds_bucket{le=\"+Inf\"} 2\ncri_guard_lat_seconds_sum 0.3\ncri_guard_lat_seconds_count 2\n"
	text := recordingText(1_700_000_000_000,
		[]int64{0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60},
		[]string{expo(0) + hist, expo(0), expo(1), expo(2), expo(2), expo(3), "", "", "", goLines, goLines, goLines, expo(7)},
		nil)
	keep := map[string]bool{"cri_guard_evictions_total": true, "cri_guard_lat_seconds_bucket": true}
	rec, err := parseRecording(strings.NewReader(text), "cri-guard", func(n string) bool { return keep[n] })
	if err != nil {
		t.Fatal(err)
	}
	if rec.target != "127.0.0.1:19713" || len(rec.scrapes) != 13 {
		t.Fatalf("target %q, %d scrapes", rec.target, len(rec.scrapes))
	}
	points, series := rec.resample(15*time.Second, "cri-guard")
	want := map[string]string{
		`up{instance="127.0.0.1:19713", job="cri-guard"}`:                                                   "1x1 0 1x1",
		`cri_guard_evictions_total{instance="127.0.0.1:19713", job="cri-guard", signal="memory.available"}`: "0 2 stale _ 7",
		`cri_guard_lat_seconds_bucket{instance="127.0.0.1:19713", job="cri-guard", le="+Inf"}`:              "2 stale _ _ _",
		`cri_guard_lat_seconds_bucket{instance="127.0.0.1:19713", job="cri-guard", le="0.1"}`:               "1 stale _ _ _",
	}
	if points != 5 || len(series) != len(want) {
		t.Errorf("%d points, series %v", points, series)
	}
	for s, w := range want {
		if got := compact(series[s]); got != w {
			t.Errorf("%s: %q, want %q", s, got, w)
		}
	}
	c := rec.counted()
	if w := `cri_guard_evictions_total{instance="127.0.0.1:19713", job="cri-guard", signal="memory.available"} +7 from 10s`; len(c) != 1 || c[0] != w {
		t.Errorf("counted %q, want %q", c, w)
	}
}

// TestTrim: an import keeps the families the rules read and says so; a
// trimmed recording that lacks a series the rules now read is refused.
func TestTrim(t *testing.T) {
	rules := []rule{{Alert: "E", Expr: `increase(cri_guard_evictions_total[5m]) > 0`}}
	text := recordingText(1_700_000_000_000, []int64{0, 5}, []string{expo(0), ""}, map[string]int64{"pressure": 5})
	b, err := trimRecording(strings.NewReader(text), rules)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, w := range []string{"# kept: cri_guard_evictions_total\n", "# TYPE cri_guard_evictions_total counter\ncri_guard_evictions_total{signal=\"memory.available\"} 0\n", "# mark ", "# scrape 1700000005000 error"} {
		if !strings.Contains(got, w) {
			t.Errorf("trimmed recording lacks %q:\n%s", w, got)
		}
	}
	if strings.Contains(got, "go_goroutines") || strings.Contains(got, "# HELP") {
		t.Errorf("trimmed recording keeps what no rule reads:\n%s", got)
	}
	if _, err := trimRecording(strings.NewReader(got), rules); err == nil {
		t.Error("a trimmed recording trimmed again")
	}

	dir := t.TempDir()
	writeFixture(t, dir, "groups:\n  - name: g\n    rules:\n      - alert: E\n        expr: increase(cri_guard_evictions_total[5m]) > 0\n      - alert: S\n        expr: cri_guard_stats_error > 0\n",
		got, "test: TestX\ninterval: 5s\n")
	if _, err := generate(dir); err == nil || !strings.Contains(err.Error(), "cri_guard_stats_error") {
		t.Errorf("generate over a recording without a series the rules read: %v", err)
	}
}

func writeFixture(t *testing.T, dir, alerts, recording, expect string) {
	t.Helper()
	d := filepath.Join(dir, "testdata", "scrape-x")
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	for p, s := range map[string]string{
		filepath.Join(dir, "alerts.yaml"): alerts, filepath.Join(d, recordingFile): recording, filepath.Join(d, expectFile): expect,
	} {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGenerate: the generated test says what expect.yaml says at the
// evaluations its marks fall on, and promtool (when there is one: make
// monitoring-test sets PROMTOOL) passes it over a recording that fires the
// alert and fails it over one that does not.
func TestGenerate(t *testing.T) {
	const alerts = `groups:
  - name: g
    rules:
      - alert: Evicting
        expr: sum by (instance) (increase(cri_guard_evictions_total[5m])) > 3
        labels: {severity: warning}
        annotations: {summary: "{{ $value | humanize }} evictions"}
      - alert: Down
        expr: up{job="cri-guard"} == 0
        for: 1m
`
	const expect = `test: TestX
interval: 15s
fire:
  - alert: Evicting
    labels: {instance: "127.0.0.1:19713", severity: warning}
    quietBefore: pressure
    firingAt: calm
`
	at := make([]int64, 37) // 3 minutes every 5 s
	for i := range at {
		at[i] = int64(5 * i)
	}
	episode := func(evictions []int) string {
		body := make([]string, len(at))
		for i := range at {
			body[i] = expo(evictions[min(i, len(evictions)-1)])
		}
		return recordingText(1_700_000_000_000, at, body, map[string]int64{"pressure": 60, "calm": 120})
	}
	ramp := func(per int) []int {
		var n []int
		for i := range at {
			// none before the pressure (60 s), then per a scrape until the calm (120 s)
			n = append(n, per*min(max(i-12, 0), 12))
		}
		return n
	}
	dir := t.TempDir()
	writeFixture(t, dir, alerts, episode(ramp(1)), expect)
	b, err := generate(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, w := range []string{
		"evaluation_interval: 15s\n",
		"  - interval: 15s\n",
		"# marks: pressure 59s999ms, calm 1m59s999ms;",
		// quiet at the last evaluation before the pressure, firing at the first after the calm
		"      - eval_time: 45s\n        alertname: Evicting\n        exp_alerts: []\n",
		"      - expr: 'max_over_time(ALERTS{alertname=\"Evicting\"}[1m])'\n        eval_time: 45s\n        exp_samples: []\n",
		"      - expr: 'ALERTS{alertname=\"Evicting\", alertstate=\"firing\"}'\n        eval_time: 2m\n        exp_samples:\n          - labels: 'ALERTS{alertname=\"Evicting\", alertstate=\"firing\", instance=\"127.0.0.1:19713\", severity=\"warning\"}'\n",
		// the others never fire, to the end of the recording
		"      - eval_time: 3m\n        alertname: Down\n        exp_alerts: []\n",
		"      - expr: 'max_over_time(ALERTS{alertname=\"Down\", alertstate=\"firing\"}[3m15s])'\n        eval_time: 3m\n",
		"      - series: 'up{instance=\"127.0.0.1:19713\", job=\"cri-guard\"}'\n        values: '1x12'\n",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("generated test lacks %q:\n%s", w, got)
		}
	}

	// an alert the expectation leaves open has no case either way
	writeFixture(t, dir, alerts, episode(ramp(1)), expect+"notAsserted: [Down]\n")
	if b, err = generate(dir); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "alertname: Down") || strings.Contains(string(b), `alertname="Down"`) || !strings.Contains(string(b), "  # not asserted: Down\n") {
		t.Errorf("Down not asserted, yet:\n%s", b)
	}
	writeFixture(t, dir, alerts, episode(ramp(1)), expect+"notAsserted: [Evicting]\n")
	if _, err = generate(dir); err == nil {
		t.Error("an alert both fired and not asserted")
	}

	promtool := os.Getenv("PROMTOOL")
	if promtool == "" {
		promtool, _ = exec.LookPath("promtool")
	}
	if promtool == "" {
		t.Log("no promtool (PROMTOOL or on PATH): the generated test is not run")
		return
	}
	promtest := func(recording string) error {
		writeFixture(t, dir, alerts, recording, expect)
		b, err := generate(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, outFile), b, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(promtool, "test", "rules", outFile)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	if err := promtest(episode(ramp(1))); err != nil {
		t.Errorf("12 evictions in a minute: %v", err)
	}
	// none in the whole episode: the alert must not fire
	if err := promtest(episode(ramp(0))); err == nil || !strings.Contains(err.Error(), `alertname="Evicting", alertstate="firing"`) {
		t.Errorf("no evictions: promtool %v, want the firing expectation failed", err)
	}
	// cri-guard not answering from 1m30s: Down fires and must fail the test
	failing := episode(ramp(1))
	var cut strings.Builder
	down := false
	for _, l := range strings.SplitAfter(failing, "\n") {
		if strings.HasPrefix(l, "# scrape 1700000090000") {
			down = true
		}
		if down && strings.HasPrefix(l, "# scrape ") {
			cut.WriteString(strings.Replace(l, " ok\n", " error connection refused\n", 1))
			continue
		}
		if !down || strings.HasPrefix(l, "# mark ") {
			cut.WriteString(l)
		}
	}
	if err := promtest(cut.String()); err == nil || !strings.Contains(err.Error(), "alertname: Down") {
		t.Errorf("down from 1m30s: promtool %v, want Down's quiet expectation failed", err)
	}
}
