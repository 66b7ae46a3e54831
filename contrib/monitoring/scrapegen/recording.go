package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// recording is what the cluster tests' recorder wrote
// (integration/cluster/cluster_scrape_test.go): the scrapes of one
// cri-guard, in time order, and the marks of the episode.
type recording struct {
	target  string   // host:port scraped, the instance label
	kept    []string // a trimmed recording's cri-guard series; nil: all
	scrapes []scrape
	marks   []mark
}

type scrape struct {
	at      time.Time
	err     string             // the scrape failed: up is 0
	samples map[string]float64 // by series, in promtool's notation
}

type mark struct {
	at   time.Time
	name string
}

// parseRecording reads a recording. Each scrape's exposition is parsed as
// Prometheus would (expfmt), its series named with the target labels
// Prometheus adds (job, instance); only the series names keep selects are
// kept.
func parseRecording(in io.Reader, job string, keep func(name string) bool) (*recording, error) {
	rec := &recording{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var body bytes.Buffer
	var cur *scrape
	line := 0
	flush := func() error {
		if cur == nil {
			return nil
		}
		if cur.err == "" {
			s, err := parseExposition(&body, job, rec.target, keep)
			if err != nil {
				return fmt.Errorf("scrape at %d: %w", cur.at.UnixMilli(), err)
			}
			cur.samples = s
		}
		if n := len(rec.scrapes); n > 0 && !cur.at.After(rec.scrapes[n-1].at) {
			return fmt.Errorf("scrape at %d is not after the one before", cur.at.UnixMilli())
		}
		rec.scrapes = append(rec.scrapes, *cur)
		cur = nil
		body.Reset()
		return nil
	}
	for sc.Scan() {
		line++
		l := sc.Text()
		switch {
		case line == 1:
			// # cri-guard scrape recording of TEST: target HOST:PORT, every D
			_, rest, ok := strings.Cut(l, ": target ")
			target, _, ok2 := strings.Cut(rest, ",")
			if !strings.HasPrefix(l, "# cri-guard scrape recording") || !ok || !ok2 || target == "" {
				return nil, fmt.Errorf("line 1: not a recording's header: %q", l)
			}
			rec.target = target
		case line == 2 && strings.HasPrefix(l, keptPrefix):
			rec.kept = strings.Fields(strings.TrimPrefix(l, keptPrefix))
		case strings.HasPrefix(l, "# scrape "):
			if err := flush(); err != nil {
				return nil, err
			}
			f := strings.SplitN(strings.TrimPrefix(l, "# scrape "), " ", 3)
			at, err := unixMilli(f[0])
			if err != nil || len(f) < 2 || (f[1] != "ok" && f[1] != "error") {
				return nil, fmt.Errorf("line %d: %q", line, l)
			}
			cur = &scrape{at: at}
			if f[1] == "error" {
				cur.err = "failed"
				if len(f) == 3 {
					cur.err = f[2]
				}
			}
		case strings.HasPrefix(l, "# mark "):
			f := strings.SplitN(strings.TrimPrefix(l, "# mark "), " ", 2)
			at, err := unixMilli(f[0])
			if err != nil || len(f) != 2 || f[1] == "" {
				return nil, fmt.Errorf("line %d: %q", line, l)
			}
			rec.marks = append(rec.marks, mark{at: at, name: f[1]})
		case cur != nil && cur.err == "":
			body.WriteString(l)
			body.WriteByte('\n')
		case strings.TrimSpace(l) != "":
			return nil, fmt.Errorf("line %d: outside a scrape: %q", line, l)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if len(rec.scrapes) == 0 {
		return nil, fmt.Errorf("no scrape recorded")
	}
	return rec, nil
}

func unixMilli(s string) (time.Time, error) {
	ms, err := strconv.ParseInt(s, 10, 64)
	return time.UnixMilli(ms), err
}

// parseExposition returns the samples of one scrape by series; histograms
// and summaries under the names Prometheus stores them as.
func parseExposition(body io.Reader, job, instance string, keep func(string) bool) (map[string]float64, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(body)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	add := func(name string, labels map[string]string, v float64) error {
		if !keep(name) {
			return nil
		}
		for _, l := range []string{"job", "instance"} {
			if _, ok := labels[l]; ok {
				return fmt.Errorf("%s: exposes a target label %q", name, l)
			}
		}
		labels["job"], labels["instance"] = job, instance
		out[seriesName(name, labels)] = v
		return nil
	}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			base := func(extra ...string) map[string]string {
				l := map[string]string{}
				for _, lp := range m.GetLabel() {
					l[lp.GetName()] = lp.GetValue()
				}
				for i := 0; i+1 < len(extra); i += 2 {
					l[extra[i]] = extra[i+1]
				}
				return l
			}
			var err error
			switch {
			case m.Counter != nil:
				err = add(name, base(), m.GetCounter().GetValue())
			case m.Gauge != nil:
				err = add(name, base(), m.GetGauge().GetValue())
			case m.Untyped != nil:
				err = add(name, base(), m.GetUntyped().GetValue())
			case m.Histogram != nil:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					if err = add(name+"_bucket", base("le", formatFloat(b.GetUpperBound())), float64(b.GetCumulativeCount())); err != nil {
						break
					}
				}
				if err == nil {
					err = add(name+"_bucket", base("le", "+Inf"), float64(h.GetSampleCount()))
				}
				if err == nil {
					err = add(name+"_sum", base(), h.GetSampleSum())
				}
				if err == nil {
					err = add(name+"_count", base(), float64(h.GetSampleCount()))
				}
			case m.Summary != nil:
				s := m.GetSummary()
				for _, q := range s.GetQuantile() {
					if err = add(name, base("quantile", formatFloat(q.GetQuantile())), q.GetValue()); err != nil {
						break
					}
				}
				if err == nil {
					err = add(name+"_sum", base(), s.GetSampleSum())
				}
				if err == nil {
					err = add(name+"_count", base(), float64(s.GetSampleCount()))
				}
			}
			if err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// seriesName is name{label="value", ...} with the labels sorted, as
// promtool's input_series take it.
func seriesName(name string, labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(name)
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strconv.Quote(labels[k]))
	}
	b.WriteByte('}')
	return b.String()
}

// formatFloat is a value as the exposition format and PromQL write it.
func formatFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	case math.IsNaN(f):
		return "NaN"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// resample returns, for each series, its values at t0, t0+interval, ...
// up to the last scrape (t0 the first scrape), as promtool's input_series
// notation: each point is the latest scrape within the interval before it,
// as a Prometheus scraping at that interval would have stored; a series a
// scrape lacks is stale there (Prometheus writes a stale marker when a
// series goes away or its scrape fails), then missing; up is 1 or 0 by
// the scrape's success. A point with no scrape in its interval is missing
// for every series, up too.
func (r *recording) resample(interval time.Duration, job string) (points int, series map[string][]string) {
	t0 := r.scrapes[0].at
	points = int(r.scrapes[len(r.scrapes)-1].at.Sub(t0)/interval) + 1
	up := seriesName("up", map[string]string{"job": job, "instance": r.target})
	series = map[string][]string{up: make([]string, points)}
	for _, s := range r.scrapes {
		for name := range s.samples {
			if series[name] == nil {
				series[name] = make([]string, points)
			}
		}
	}
	j := 0 // the next scrape not yet taken
	for k := range points {
		at := t0.Add(time.Duration(k) * interval)
		var took *scrape
		for j < len(r.scrapes) && !r.scrapes[j].at.After(at) {
			if k == 0 || r.scrapes[j].at.After(at.Add(-interval)) {
				took = &r.scrapes[j]
			}
			j++
		}
		for name, vs := range series {
			var v string
			switch {
			case took == nil:
				v = "_"
			case name == up && took.err != "":
				v = "0"
			case name == up:
				v = "1"
			default:
				f, ok := took.samples[name]
				switch {
				case ok:
					v = formatFloat(f)
				case k > 0 && vs[k-1] != "_" && vs[k-1] != "stale":
					v = "stale"
				default:
					v = "_"
				}
			}
			vs[k] = v
		}
	}
	return points, series
}

// compact writes values as promtool's expanding notation: a run of n equal
// numbers as "vx(n-1)", stale and missing points one by one.
func compact(vs []string) string {
	var parts []string
	for i := 0; i < len(vs); {
		n := 1
		for i+n < len(vs) && vs[i+n] == vs[i] {
			n++
		}
		switch {
		case vs[i] == "_" || vs[i] == "stale":
			for range n {
				parts = append(parts, vs[i])
			}
		case n == 1:
			parts = append(parts, vs[i])
		default:
			parts = append(parts, fmt.Sprintf("%sx%d", vs[i], n-1))
		}
		i += n
	}
	return strings.Join(parts, " ")
}

// keptPrefix starts a trimmed recording's second line: the cri-guard series
// the rules read when it was imported, the only ones it keeps.
const keptPrefix = "# kept: "

// ownSeries are the cri-guard series names (cri_guard_*) the rules read.
func ownSeries(rules []rule) []string {
	var out []string
	for w := range referenced(rules) {
		if strings.HasPrefix(w, "cri_guard_") {
			out = append(out, w)
		}
	}
	sort.Strings(out)
	return out
}

// trimRecording keeps of each scrape the metric families the rules read
// (their TYPE and samples; a histogram's or summary's whole family when one
// of its series is read), and says which in a second line: the rest (the
// Go runtime's, the process', the CRI latency buckets, every HELP) is most
// of a scrape and no rule's input.
func trimRecording(in io.Reader, rules []rule) ([]byte, error) {
	read := referenced(rules)
	keepFamily := func(f string) bool {
		return read[f] || read[f+"_bucket"] || read[f+"_sum"] || read[f+"_count"]
	}
	var out bytes.Buffer
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	family, keep := "", false
	line := 0
	for sc.Scan() {
		line++
		l := sc.Text()
		switch {
		case line == 1:
			if !strings.HasPrefix(l, "# cri-guard scrape recording") {
				return nil, fmt.Errorf("line 1: not a recording's header: %q", l)
			}
			out.WriteString(l + "\n" + keptPrefix + strings.Join(ownSeries(rules), " ") + "\n")
			continue
		case line == 2 && strings.HasPrefix(l, keptPrefix):
			return nil, errors.New("already trimmed")
		case strings.HasPrefix(l, "# scrape "), strings.HasPrefix(l, "# mark "):
			family, keep = "", true
		case strings.HasPrefix(l, "# HELP "), strings.HasPrefix(l, "# TYPE "):
			f := strings.Fields(l)
			if len(f) < 3 {
				return nil, fmt.Errorf("line %d: %q", line, l)
			}
			family, keep = f[2], keepFamily(f[2])
			if f[1] == "HELP" {
				continue
			}
		case strings.HasPrefix(l, "#"), strings.TrimSpace(l) == "":
		default:
			name := l
			if i := strings.IndexAny(l, "{ "); i >= 0 {
				name = l[:i]
			}
			if family == "" || !strings.HasPrefix(name, family) {
				family, keep = name, keepFamily(name)
			}
		}
		if keep {
			out.WriteString(l + "\n")
		}
	}
	return out.Bytes(), sc.Err()
}

// counted says, for each counter (a _total series) that rose in the
// recording, by how much and when first: what the episode did, for the
// reader of the generated test.
func (r *recording) counted() []string {
	t0 := r.scrapes[0].at
	type rise struct {
		total, last float64
		first       time.Duration
	}
	rises := map[string]*rise{}
	for i, s := range r.scrapes {
		for name, v := range s.samples {
			base, _, _ := strings.Cut(name, "{")
			if !strings.HasSuffix(base, "_total") {
				continue
			}
			c := rises[name]
			if c == nil {
				// a child first scraped after the first scrape was made
				// by its first events since then
				c = &rise{}
				if i == 0 {
					c.last = v
				}
				rises[name] = c
			}
			d := v - c.last
			if v < c.last { // a reset: counting again from 0
				d = v
			}
			if d > 0 && c.total == 0 {
				c.first = s.at.Sub(t0)
			}
			c.total += d
			c.last = v
		}
	}
	var out []string
	for name, c := range rises {
		if c.total > 0 {
			out = append(out, fmt.Sprintf("%s +%s from %s", name, formatFloat(c.total), dur(c.first.Round(time.Second))))
		}
	}
	sort.Strings(out)
	return out
}
