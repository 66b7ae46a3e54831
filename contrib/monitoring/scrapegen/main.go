// Command scrapegen writes contrib/monitoring/alerts_scrape_test.yaml, a
// promtool rule test whose input series are recorded scrapes of a real
// cri-guard: the cluster tests' recorder (CRI_GUARD_SCRAPE_DIR, see
// integration/cluster/cluster_scrape_test.go) scrapes its /metrics through
// a pressure episode, and each testdata/scrape-*/ directory holds one such
// recording (scrapes.txt) with what the episode must show (expect.yaml):
// the alerts it fires, with their labels and the marks of the episode
// before which they are quiet (neither pending nor firing) and by which
// they fire. Every other alert of alerts.yaml must not fire at any time of
// the recording (an alert with a for: clause pending a moment notifies
// no one). alerts_test.yaml keeps the hand-written cases for the alerts
// no episode produces (cri-guard down, the state store, the API, ...).
//
// From the repository root (make monitoring-scrape):
//
//	go run ./contrib/monitoring/scrapegen -import $CRI_GUARD_SCRAPE_DIR
//	go run ./contrib/monitoring/scrapegen          # regenerate
//	go run ./contrib/monitoring/scrapegen -check   # fail if not current
//
// -import copies each expect.yaml's test's recording from the recorder's
// directory (DIR/<test>/scrapes.txt) before generating.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"
)

const (
	// job is the job label of cri-guard's scrape targets in alerts.yaml.
	job = "cri-guard"
	// outFile is the generated test, next to alerts.yaml.
	outFile = "alerts_scrape_test.yaml"
	// recordingFile and expectFile are in each testdata/scrape-*/.
	recordingFile = "scrapes.txt"
	expectFile    = "expect.yaml"
)

// expectation is a recording's expect.yaml.
type expectation struct {
	// Test is the cluster test that records the episode (its directory
	// under CRI_GUARD_SCRAPE_DIR).
	Test string `json:"test"`
	// Interval is promtool's interval (the scrape and evaluation interval
	// the recording is resampled to).
	Interval string `json:"interval"`
	// NotAsserted are alerts the episode may or may not fire (how many
	// times the kubelet retried decides): tested neither way.
	NotAsserted []string `json:"notAsserted"`
	// Fire are the alerts the episode fires.
	Fire []struct {
		Alert string `json:"alert"`
		// Labels of the firing alert, beside alertname and alertstate.
		Labels map[string]string `json:"labels"`
		// QuietBefore is a mark: neither pending nor firing at any
		// evaluation before it.
		QuietBefore string `json:"quietBefore"`
		// FiringAt is a mark: firing at the first evaluation at or after it.
		FiringAt string `json:"firingAt"`
	} `json:"fire"`
}

type rule struct {
	Alert string `json:"alert"`
	Expr  string `json:"expr"`
}

func readRules(dir string) ([]rule, error) {
	b, err := os.ReadFile(filepath.Join(dir, "alerts.yaml"))
	if err != nil {
		return nil, err
	}
	var rf struct {
		Groups []struct {
			Rules []rule `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(b, &rf); err != nil {
		return nil, fmt.Errorf("alerts.yaml: %w", err)
	}
	var rules []rule
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				rules = append(rules, r)
			}
		}
	}
	if len(rules) == 0 {
		return nil, errors.New("alerts.yaml: no alerting rule")
	}
	return rules, nil
}

var identifier = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)

// referenced are the words of the rules' expressions: a recorded series is
// kept when its name is one of them (the rest of a scrape no rule reads).
func referenced(rules []rule) map[string]bool {
	out := map[string]bool{}
	for _, r := range rules {
		for _, w := range identifier.FindAllString(r.Expr, -1) {
			out[w] = true
		}
	}
	return out
}

// recordings are the testdata/scrape-*/ directories of dir.
func recordings(dir string) ([]string, error) {
	ds, err := filepath.Glob(filepath.Join(dir, "testdata", "scrape-*"))
	sort.Strings(ds)
	return ds, err
}

func readExpectation(d string) (expectation, error) {
	var e expectation
	b, err := os.ReadFile(filepath.Join(d, expectFile))
	if err != nil {
		return e, err
	}
	if err := yaml.UnmarshalStrict(b, &e); err != nil {
		return e, fmt.Errorf("%s: %w", filepath.Join(d, expectFile), err)
	}
	if e.Test == "" || e.Interval == "" {
		return e, fmt.Errorf("%s: test and interval are required", filepath.Join(d, expectFile))
	}
	return e, nil
}

// generate returns the test file for dir's recordings, nil when it has
// none recorded yet.
func generate(dir string) ([]byte, error) {
	rules, err := readRules(dir)
	if err != nil {
		return nil, err
	}
	ds, err := recordings(dir)
	if err != nil {
		return nil, err
	}
	keep := referenced(rules)
	var groups bytes.Buffer
	n := 0
	interval := "" // promtool has one evaluation interval per file
	for _, d := range ds {
		e, err := readExpectation(d)
		if err != nil {
			return nil, err
		}
		named := slices.Clone(e.NotAsserted)
		for _, f := range e.Fire {
			if f.QuietBefore == "" || f.FiringAt == "" {
				return nil, fmt.Errorf("%s: %s: quietBefore and firingAt are required", filepath.Join(d, expectFile), f.Alert)
			}
			named = append(named, f.Alert)
		}
		for i, a := range named {
			if !slices.ContainsFunc(rules, func(r rule) bool { return r.Alert == a }) {
				return nil, fmt.Errorf("%s: %s is no alert of alerts.yaml", filepath.Join(d, expectFile), a)
			}
			if slices.Contains(named[i+1:], a) {
				return nil, fmt.Errorf("%s: %s named twice", filepath.Join(d, expectFile), a)
			}
		}
		f, err := os.Open(filepath.Join(d, recordingFile))
		if errors.Is(err, os.ErrNotExist) {
			continue // the episode's expectation, not recorded yet
		} else if err != nil {
			return nil, err
		}
		if interval != "" && e.Interval != interval {
			f.Close()
			return nil, fmt.Errorf("%s: interval %s, another recording's is %s: promtool evaluates a file's rules at one interval", d, e.Interval, interval)
		}
		interval = e.Interval
		rec, err := parseRecording(f, job, func(name string) bool { return keep[name] })
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(d, recordingFile), err)
		}
		if rec.kept != nil {
			for _, n := range ownSeries(rules) {
				if !slices.Contains(rec.kept, n) {
					return nil, fmt.Errorf("%s: alerts.yaml reads %s, which the recording did not keep when imported: record again", filepath.Join(d, recordingFile), n)
				}
			}
		}
		if err := writeGroup(&groups, filepath.Base(d), rec, e, rules); err != nil {
			return nil, fmt.Errorf("%s: %w", d, err)
		}
		n++
	}
	if n == 0 {
		return nil, nil
	}
	var out bytes.Buffer
	out.WriteString(`# Generated by contrib/monitoring/scrapegen from testdata/scrape-*/ (make
# monitoring-scrape); do not edit. promtool test rules over recorded scrapes
# of a real cri-guard through a pressure episode: the alerts each
# expect.yaml names fire, when it says, and no other alert fires (but those
# it leaves open, listed as not asserted).
rule_files:
  - alerts.yaml
`)
	fmt.Fprintf(&out, "evaluation_interval: %s\ntests:\n", interval)
	out.Write(groups.Bytes())
	return out.Bytes(), nil
}

// writeGroup writes one recording's test group: its input series, an
// alert_rule_test per alert at the end of the recording (which also makes
// promtool evaluate the rules that far), and the promql_expr_tests on
// ALERTS (Prometheus' series of pending and firing alerts) that say when
// each alert is quiet and when it fires, whatever its annotations' values.
func writeGroup(w io.Writer, name string, rec *recording, e expectation, rules []rule) error {
	md, err := model.ParseDuration(e.Interval)
	if err != nil || md <= 0 {
		return fmt.Errorf("interval %q: %v", e.Interval, err)
	}
	iv := time.Duration(md)
	points, series := rec.resample(iv, job)
	t0 := rec.scrapes[0].at
	end := time.Duration(points-1) * iv
	markAt := map[string]time.Duration{}
	for _, m := range rec.marks {
		if _, dup := markAt[m.name]; dup {
			return fmt.Errorf("mark %q twice", m.name)
		}
		markAt[m.name] = m.at.Sub(t0)
	}
	// lastBefore is the last evaluation before a mark; firstFrom the first
	// at or after it.
	lastBefore := func(m string) (time.Duration, error) {
		at, ok := markAt[m]
		if !ok {
			return 0, fmt.Errorf("no mark %q recorded", m)
		}
		k := (at - 1) / iv
		if at <= 0 {
			return 0, fmt.Errorf("mark %q is at or before the first scrape", m)
		}
		return k * iv, nil
	}
	firstFrom := func(m string) (time.Duration, error) {
		at, ok := markAt[m]
		if !ok {
			return 0, fmt.Errorf("no mark %q recorded", m)
		}
		k := (at + iv - 1) / iv
		if at < 0 || k*iv > end {
			return 0, fmt.Errorf("mark %q is outside the recording", m)
		}
		return k * iv, nil
	}
	// skip: the alerts not tested as never firing
	skip := map[string]bool{}
	for _, f := range e.Fire {
		skip[f.Alert] = true
	}
	for _, a := range e.NotAsserted {
		skip[a] = true
	}

	var marks []string
	for _, m := range rec.marks {
		marks = append(marks, fmt.Sprintf("%s %s", m.name, dur(m.at.Sub(t0))))
	}
	fmt.Fprintf(w, "  # %s: %s, %d scrapes of %s from %s to %s UTC, resampled to %s;\n  # marks: %s; the counters that rose:\n",
		name, e.Test, len(rec.scrapes), rec.target, t0.UTC().Format(time.DateTime),
		rec.scrapes[len(rec.scrapes)-1].at.UTC().Format(time.TimeOnly), dur(iv), strings.Join(marks, ", "))
	for _, c := range rec.counted() {
		fmt.Fprintf(w, "  #   %s\n", c)
	}
	if len(e.NotAsserted) > 0 {
		fmt.Fprintf(w, "  # not asserted: %s\n", strings.Join(e.NotAsserted, ", "))
	}
	fmt.Fprintf(w, "  - interval: %s\n    input_series:\n", dur(iv))
	names := make([]string, 0, len(series))
	for s := range series {
		names = append(names, s)
	}
	sort.Strings(names)
	for _, s := range names {
		fmt.Fprintf(w, "      - series: %s\n        values: '%s'\n", yamlQuote(s), compact(series[s]))
	}

	fmt.Fprintf(w, "    alert_rule_test:\n")
	for _, r := range rules {
		if !skip[r.Alert] {
			fmt.Fprintf(w, "      - eval_time: %s\n        alertname: %s\n        exp_alerts: []\n", dur(end), r.Alert)
		}
	}
	for _, f := range e.Fire {
		q, err := lastBefore(f.QuietBefore)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "      - eval_time: %s\n        alertname: %s\n        exp_alerts: []\n", dur(q), f.Alert)
	}
	fmt.Fprintf(w, "    promql_expr_test:\n")
	// the whole recording: a range that reaches back before its start
	whole := dur(end + iv)
	for _, r := range rules {
		if !skip[r.Alert] {
			fmt.Fprintf(w, "      # %s: not firing at any time of the episode\n", r.Alert)
			fmt.Fprintf(w, "      - expr: 'max_over_time(ALERTS{alertname=\"%s\", alertstate=\"firing\"}[%s])'\n        eval_time: %s\n        exp_samples: []\n", r.Alert, whole, dur(end))
		}
	}
	for _, f := range e.Fire {
		q, err := lastBefore(f.QuietBefore)
		if err != nil {
			return err
		}
		at, err := firstFrom(f.FiringAt)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "      # %s: quiet before %s, firing by %s\n", f.Alert, f.QuietBefore, f.FiringAt)
		fmt.Fprintf(w, "      - expr: 'max_over_time(ALERTS{alertname=\"%s\"}[%s])'\n        eval_time: %s\n        exp_samples: []\n", f.Alert, dur(q+iv), dur(q))
		labels := map[string]string{"alertname": f.Alert, "alertstate": "firing"}
		for k, v := range f.Labels {
			labels[k] = v
		}
		fmt.Fprintf(w, "      - expr: 'ALERTS{alertname=\"%s\", alertstate=\"firing\"}'\n        eval_time: %s\n        exp_samples:\n          - labels: %s\n            value: 1\n",
			f.Alert, dur(at), yamlQuote(seriesName("ALERTS", labels)))
	}
	return nil
}

// dur is a duration as promtool reads it.
func dur(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	return model.Duration(d).String()
}

// yamlQuote is s in single quotes (no escapes but a doubled quote).
func yamlQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// importRecordings copies each expectation's recording from the
// recorder's directory.
func importRecordings(dir, from string) error {
	rules, err := readRules(dir)
	if err != nil {
		return err
	}
	ds, err := recordings(dir)
	if err != nil {
		return err
	}
	n := 0
	for _, d := range ds {
		e, err := readExpectation(d)
		if err != nil {
			return err
		}
		in, err := os.Open(filepath.Join(from, e.Test, recordingFile))
		if errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(os.Stderr, "scrapegen: %s: no recording of %s, kept as it was\n", d, e.Test)
			continue
		} else if err != nil {
			return err
		}
		n++
		b, err := trimRecording(in, rules)
		in.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", in.Name(), err)
		}
		if err := os.WriteFile(filepath.Join(d, recordingFile), b, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "scrapegen: %s: %s\n", filepath.Join(d, recordingFile), e.Test)
	}
	if n == 0 {
		return fmt.Errorf("%s: no recording for any of %s/testdata/scrape-*/", from, dir)
	}
	return nil
}

func main() {
	dir := flag.String("dir", "contrib/monitoring", "the directory of alerts.yaml and testdata/scrape-*/")
	check := flag.Bool("check", false, "only check that "+outFile+" is current")
	from := flag.String("import", "", "copy the recordings from this CRI_GUARD_SCRAPE_DIR first")
	flag.Parse()
	if err := run(*dir, *from, *check); err != nil {
		fmt.Fprintln(os.Stderr, "scrapegen:", err)
		os.Exit(1)
	}
}

func run(dir, from string, check bool) error {
	if from != "" {
		if err := importRecordings(dir, from); err != nil {
			return err
		}
	}
	b, err := generate(dir)
	if err != nil {
		return err
	}
	out := filepath.Join(dir, outFile)
	old, err := os.ReadFile(out)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	switch {
	case check && b == nil && old != nil:
		return fmt.Errorf("%s exists but no testdata/scrape-*/%s", out, recordingFile)
	case check && !bytes.Equal(old, b):
		return fmt.Errorf("%s is not current: go run ./contrib/monitoring/scrapegen", out)
	case check:
		return nil
	case b == nil:
		return fmt.Errorf("no testdata/scrape-*/%s recorded", recordingFile)
	}
	return os.WriteFile(out, b, 0o644)
}
