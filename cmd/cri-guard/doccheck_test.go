package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cri-guard/cri-guard/internal/config"
	"github.com/cri-guard/cri-guard/internal/controller"
	"github.com/cri-guard/cri-guard/internal/metrics"
)

// The operator's documentation is checked against the code it describes:
// its links resolve (docs_test.go), the series it names are served, and the
// configuration keys it names are read. What counts as a mention:
//
//   - A metric: any token that starts with cri-guard's namespace and an
//     underscore (metrics.Namespace, "cri_guard_"; the controller's
//     controller.Namespace starts with it), anywhere in the file, code
//     blocks included: the prefix does not occur in prose. A token followed
//     by "*" is a pattern ("cri_guard_*"), not a name. Labels written right
//     after the name ({op,result} or {op="put"}) must be labels of the
//     series, or job and instance, which Prometheus adds.
//   - A configuration key, in markdown only: an inline code span whose
//     leading word (up to a space, ":", "=", "<", ">", "[", "{", "(" or ",")
//     is a dotted lowerCamel path ("kubernetes.kubeconfig",
//     "fastPoll.interval: 10ms") whose first segment is a section of the
//     config (a key with keys of its own: critical, fastPoll, kubernetes,
//     log). Kubelet signal names ("memory.available",
//     "allocatableMemory.available"), cgroup files ("memory.events.local")
//     and Go names ("kube.APIOf") start with no section and are not keys;
//     a bare domain whose first label is a section ("kubernetes.io") would
//     count, and is written with its path ("kubernetes.io/config.source").
//     A single word ("podsCgroup", "failCgroupV1: false") is not checked
//     outside the key table: the top-level keys share their names with the
//     kubelet's KubeletConfiguration fields, which the docs name too.
//   - The key table (a table whose first header cell is "key",
//     docs/configuration.md's reference): every code span of its first
//     column is a key, one word or dotted, and together they cover every
//     key (a section's row covers its keys, a key's row its section).
//
// A removed key (config.RemovedKeys) may be named only in a section (a
// heading to the next) that quotes the warning check-config gives for it,
// that is, where the docs say it is removed and what the operator sees.

// docFiles are the files checked under root: the README and docs/*.md,
// and contrib/monitoring's rules, their tests and the dashboard (metric
// names only: TestMonitoringSeries parses their queries).
func docFiles(root string) ([]string, error) {
	files := []string{"README.md"}
	for _, pattern := range []string{"docs/*.md", "contrib/monitoring/*.yaml", "contrib/monitoring/*.json"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			return nil, err
		}
		for _, f := range m {
			rel, err := filepath.Rel(root, f)
			if err != nil {
				return nil, err
			}
			files = append(files, filepath.ToSlash(rel))
		}
	}
	return files, nil
}

// finding is one problem of a doc, at its line.
type finding struct {
	file string
	line int
	msg  string
}

func (f finding) String() string { return fmt.Sprintf("%s:%d: %s", f.file, f.line, f.msg) }

// seriesIndex maps each name a doc may give a metric to its label names:
// each series as Prometheus stores it (a histogram's _bucket, _sum and
// _count) and each histogram's or summary's family name.
type seriesIndex map[string][]string

func (ix seriesIndex) addFamilies(mfs []*dto.MetricFamily) {
	for name, labels := range seriesOf(mfs) {
		ix[name] = labels
	}
	for _, mf := range mfs {
		if t := mf.GetType(); t == dto.MetricType_HISTOGRAM || t == dto.MetricType_SUMMARY {
			ix[mf.GetName()] = slices.Clone(ix[mf.GetName()+"_count"])
		}
	}
}

var descString = regexp.MustCompile(`^Desc\{fqName: "([^"]+)".*, variableLabels: \{([^}]*)\}\}$`)

// controllerSeries returns the controller's series from the registry its
// code builds. Its vectors have no child until the controller acts, and a
// registry gathers only children: the families are taken from what the
// registry describes (each descriptor's name and variable labels, read from
// its String, as client_golang's Desc has no accessors; one it cannot read
// fails the test), their types from what it gathers (so a histogram without
// a child is known by its family name only).
func controllerSeries(t *testing.T) seriesIndex {
	t.Helper()
	reg := controller.NewMetrics(func() int { return 0 }).Registry()
	ix := seriesIndex{}
	ch := make(chan *prometheus.Desc)
	go func() { reg.Describe(ch); close(ch) }()
	for d := range ch {
		m := descString.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("controller registry: descriptor %s not understood", d)
		}
		var labels []string
		for _, l := range strings.Split(m[2], ",") {
			if l = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(l), "c("), ")"); l != "" {
				labels = append(labels, l)
			}
		}
		ix[m[1]] = labels
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	ix.addFamilies(mfs)
	if _, ok := ix[controller.Namespace+"_leader"]; !ok || len(ix) < 10 {
		t.Fatalf("controller registry: %d series described, no %s_leader", len(ix), controller.Namespace)
	}
	return ix
}

// keyIndex is what config says of keys.
type keyIndex struct {
	keys     []string
	sections []string
	// removed maps each removed key to the warning check-config gives
	// for it
	removed map[string]string
}

// nestedKey is the YAML mapping that sets the dotted key to value.
func nestedKey(key, value string) string {
	parts := strings.Split(key, ".")
	for i := len(parts) - 1; i >= 0; i-- {
		value = "{" + parts[i] + ": " + value + "}"
	}
	return value + "\n"
}

func configKeys(t *testing.T) keyIndex {
	t.Helper()
	ix := keyIndex{keys: config.Keys(), removed: map[string]string{}}
	for _, k := range ix.keys {
		if slices.ContainsFunc(ix.keys, func(s string) bool { return strings.HasPrefix(s, k+".") }) {
			ix.sections = append(ix.sections, k)
		}
	}
	dir := t.TempDir()
	for _, k := range config.RemovedKeys() {
		p := filepath.Join(dir, "removed.yaml")
		if err := os.WriteFile(p, []byte(nestedKey(k, "{}")), 0o600); err != nil {
			t.Fatal(err)
		}
		_, warnings, err := config.Check(p)
		if err != nil || len(warnings) != 1 || !strings.HasPrefix(warnings[0], k+": ") {
			t.Fatalf("check-config of a file setting only %s: %v, warnings %q", k, err, warnings)
		}
		ix.removed[k] = warnings[0]
	}
	if len(ix.sections) < 3 || len(ix.removed) == 0 {
		t.Fatalf("config: sections %q, removed %q", ix.sections, ix.removed)
	}
	return ix
}

// docChecker runs the three checks.
type docChecker struct {
	series  seriesIndex
	keys    keyIndex
	pending []string
}

// docStats counts what the checks looked at.
type docStats struct {
	metricMentions, keyMentions int
	metrics, keys               map[string]bool
}

func (s docStats) String() string {
	return fmt.Sprintf("metric mentions %d (%d distinct), key mentions %d (%d distinct)",
		s.metricMentions, len(s.metrics), s.keyMentions, len(s.keys))
}

// check returns every problem of the files under root, in order.
func (c docChecker) check(root string, files []string) ([]finding, docStats, error) {
	st := docStats{metrics: map[string]bool{}, keys: map[string]bool{}}
	var out []finding
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, st, err
		}
		text := string(b)
		if strings.HasSuffix(f, ".md") {
			bad, err := brokenLinks(root, f, c.pending)
			if err != nil {
				return nil, st, err
			}
			out = append(out, bad...)
			out = append(out, c.checkKeys(f, text, &st)...)
		}
		out = append(out, c.checkMetrics(f, text, &st)...)
	}
	return out, st, nil
}

var (
	metricToken = regexp.MustCompile(`(?:^|[^A-Za-z0-9_:])(` + metrics.Namespace + `_[A-Za-z0-9_:]*)(\*|\{[^}\n]*\})?`)
	labelName   = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// checkMetrics reports each metric the text names that neither registry
// serves, and each label it gives one that the series lacks.
func (c docChecker) checkMetrics(file, text string, st *docStats) []finding {
	var out []finding
	for i, line := range strings.Split(text, "\n") {
		for _, m := range metricToken.FindAllStringSubmatch(line, -1) {
			name, after := m[1], m[2]
			if after == "*" {
				continue
			}
			st.metricMentions++
			st.metrics[name] = true
			labels, ok := c.series[name]
			if !ok {
				out = append(out, finding{file, i + 1, "unknown metric " + name + ": not a series of cri-guard's or cri-guard-controller's registry"})
				continue
			}
			if after == "" {
				continue
			}
			var named []string
			body := after[1 : len(after)-1]
			if strings.ContainsAny(body, "=~") {
				for _, l := range matcher.FindAllStringSubmatch(stringLit.ReplaceAllString(strings.ReplaceAll(body, `\"`, `"`), `""`), -1) {
					named = append(named, l[1])
				}
			} else {
				for _, l := range strings.Split(body, ",") {
					named = append(named, strings.TrimSpace(l))
				}
			}
			for _, l := range named {
				if !labelName.MatchString(l) || (!slices.Contains(labels, l) && !slices.Contains(targetLabels, l)) {
					out = append(out, finding{file, i + 1, fmt.Sprintf("metric %s has no label %q (it has %q)", name, l, labels)})
				}
			}
		}
	}
	return out
}

// span is an inline code span of a markdown text.
type span struct {
	line int
	text string
}

var codeSpan = regexp.MustCompile("`[^`]+`")

// markdownSpans returns the inline code spans of a markdown text outside
// fenced blocks; a span may wrap within its paragraph (its line is where it
// starts, its text has the line break as a space).
func markdownSpans(text string) []span {
	lines := strings.Split(text, "\n")
	fenced := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			lines[i] = ""
		} else if fenced {
			lines[i] = ""
		}
	}
	var out []span
	for start := 0; start < len(lines); {
		if strings.TrimSpace(lines[start]) == "" {
			start++
			continue
		}
		end := start
		for end < len(lines) && strings.TrimSpace(lines[end]) != "" {
			end++
		}
		para := strings.Join(lines[start:end], "\n")
		for _, loc := range codeSpan.FindAllStringIndex(para, -1) {
			out = append(out, span{
				line: start + 1 + strings.Count(para[:loc[0]], "\n"),
				text: strings.TrimSpace(strings.ReplaceAll(para[loc[0]+1:loc[1]-1], "\n", " ")),
			})
		}
		start = end
	}
	return out
}

var dottedPath = regexp.MustCompile(`^[a-z][A-Za-z0-9]*(\.[a-z][A-Za-z0-9]*)+$`)

// leadingWord is a span's text up to the first character that cannot be
// part of a key.
func leadingWord(s string) string {
	if i := strings.IndexAny(s, " \t:=<>[{(,"); i >= 0 {
		return s[:i]
	}
	return s
}

// sections returns, for each line of a markdown text, the text of its
// section: from the heading before it (or the top) to the next heading.
func sections(text string) []string {
	lines := strings.Split(text, "\n")
	out := make([]string, len(lines))
	fenced := false
	start := 0
	flush := func(end int) {
		s := strings.Join(lines[start:end], "\n")
		for i := start; i < end; i++ {
			out[i] = s
		}
		start = end
	}
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
		}
		if !fenced && strings.HasPrefix(l, "#") && i > start {
			flush(i)
		}
	}
	flush(len(lines))
	return out
}

// keyTable returns the spans of the first column of each key table of a
// markdown text, and the line of each table's header.
func keyTable(text string) (keys []span, headers []int) {
	in := false
	for i, l := range strings.Split(text, "\n") {
		t := strings.TrimSpace(l)
		if !strings.HasPrefix(t, "|") {
			in = false
			continue
		}
		cells := strings.Split(strings.Trim(t, "|"), "|")
		first := strings.TrimSpace(cells[0])
		switch {
		case !in && strings.EqualFold(first, "key"):
			in = true
			headers = append(headers, i+1)
		case in && strings.Trim(first, "-: ") == "":
		case in:
			for _, m := range codeSpan.FindAllString(first, -1) {
				keys = append(keys, span{i + 1, strings.TrimSpace(m[1 : len(m)-1])})
			}
		}
	}
	return keys, headers
}

// checkKeys reports each configuration key the markdown text names that
// config does not read, each removed key named outside a section that
// quotes its warning, and each key a key table leaves out.
func (c docChecker) checkKeys(file, text string, st *docStats) []finding {
	var out []finding
	secs := sections(text)
	check := func(line int, key string) {
		st.keyMentions++
		st.keys[key] = true
		for r, warning := range c.keys.removed {
			if key == r || strings.HasPrefix(key, r+".") {
				if !strings.Contains(secs[line-1], warning) {
					out = append(out, finding{file, line, fmt.Sprintf("removed key %s named where its section does not quote the warning check-config gives: %q", key, warning)})
				}
				return
			}
		}
		if !slices.Contains(c.keys.keys, key) {
			out = append(out, finding{file, line, "unknown configuration key " + key + ": not in config.Keys()"})
		}
	}
	rows, headers := keyTable(text)
	for _, s := range markdownSpans(text) {
		w := leadingWord(s.text)
		if slices.Contains(rows, s) || !dottedPath.MatchString(w) {
			continue // a key table's key is checked below
		}
		if first, _, _ := strings.Cut(w, "."); slices.Contains(c.keys.sections, first) {
			check(s.line, w)
		}
	}
	var listed []string
	for _, s := range rows {
		w := leadingWord(s.text)
		check(s.line, w)
		listed = append(listed, w)
	}
	if len(headers) == 0 {
		return out
	}
	for _, k := range c.keys.keys {
		covered := slices.ContainsFunc(listed, func(l string) bool {
			return l == k || strings.HasPrefix(k, l+".") || strings.HasPrefix(l, k+".")
		})
		if !covered {
			out = append(out, finding{file, headers[0], "key table lacks " + k})
		}
	}
	return out
}

// realDocChecker checks against the code as built: cri-guard's and the
// controller's registries, and config's keys.
func realDocChecker(t *testing.T) docChecker {
	t.Helper()
	ix := seriesIndex{}
	ix.addFamilies(exportedFamilies(t))
	for name, labels := range controllerSeries(t) {
		ix[name] = labels
	}
	return docChecker{series: ix, keys: configKeys(t), pending: pendingDocs}
}

// TestDocChecks: the checks pass over the tree, and each finds what a
// small broken tree has wrong (a broken link, an unknown metric, a label a
// series lacks, an unknown key, a removed key where it is not said to be
// removed, a key the key table leaves out) at its file and line, and
// passes what only looks like a metric or a key.
func TestDocChecks(t *testing.T) {
	c := realDocChecker(t)

	t.Run("tree", func(t *testing.T) {
		files, err := docFiles(repoRoot)
		if err != nil {
			t.Fatal(err)
		}
		if len(files) < 10 {
			t.Fatalf("doc files: only %q", files)
		}
		bad, st, err := c.check(repoRoot, files)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bad {
			t.Error(b)
		}
		t.Logf("%d files: %s", len(files), st)
		if st.metricMentions < 20 || st.keyMentions < 20 {
			t.Errorf("too few mentions found: %s", st)
		}
	})

	t.Run("fixtures", func(t *testing.T) {
		root := t.TempDir()
		for _, d := range []string{"docs", "contrib/monitoring"} {
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		write := func(name, text string) {
			t.Helper()
			if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		// a key table listing every key but one
		var table strings.Builder
		table.WriteString("| key | default |\n|---|---|\n")
		for _, k := range c.keys.keys {
			if k != "psiTrigger" && !slices.Contains(c.keys.sections, k) {
				fmt.Fprintf(&table, "| `%s` | x |\n", k)
			}
		}
		table.WriteString("| `kubernetes.nodename` | `log.lvl: info` |\n")
		write("README.md", "# R\n\nSee [the keys](docs/keys.md#keys) and [gone](docs/gone.md).\n")
		write("docs/keys.md", "# Keys\n\n## Keys\n\n"+table.String())
		warning := c.keys.removed["kubernetes.taint"]
		write("docs/a.md", strings.Join([]string{
			"# A",
			"",
			"`cri_guard_evictions_total{signal}` and `cri_guard_*`, `cri_guard_cri_request_duration_seconds_bucket{le}`,",
			"`cri_guard_evicitons_total` and `cri_guard_controller_condition_to_taint_seconds{action}`;",
			"`cri_guard_api_writes_total{op=\"event\",reason=\"x\"}` and `cri_guard_controller_leaders`.",
			"",
			"`kubernetes.kubeconfig`, `fastPoll.interval: 10ms`, `memory.available`, `kubernetes.io/config.source`,",
			"`failCgroupV1: false`, `kube.APIOf`, `allocatableMemory.available < 200Mi`, `critical.rule`, `log.levels: debug`,",
			"`kubernetes.taint` and `fastPoll.maxRate",
			"1Gi`, `kubernetes.nodename`.",
			"",
			"```",
			"`kubernetes.nope` in a fence",
			"```",
			"",
			"## Migrating",
			"",
			"`kubernetes.taint` is removed:",
			"",
			"    " + warning,
			"",
			"## After",
			"",
			"`kubernetes.taint.enabled` is gone too.",
		}, "\n"))
		write("contrib/monitoring/alerts.yaml", "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: cri_guard_degraded > 0\n    annotations: {summary: 'see cri_guard_degrade'}\n")
		files, err := docFiles(root)
		if err != nil {
			t.Fatal(err)
		}
		bad, st, err := c.check(root, files)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, b := range bad {
			got = append(got, b.String())
		}
		want := []string{
			"README.md:3: docs/gone.md: no file docs/gone.md",
			"docs/a.md:4: unknown metric cri_guard_evicitons_total: not a series of cri-guard's or cri-guard-controller's registry",
			`docs/a.md:5: metric cri_guard_api_writes_total has no label "reason" (it has ["op" "result"])`,
			"docs/a.md:5: unknown metric cri_guard_controller_leaders: not a series of cri-guard's or cri-guard-controller's registry",
			"docs/a.md:8: unknown configuration key critical.rule: not in config.Keys()",
			"docs/a.md:8: unknown configuration key log.levels: not in config.Keys()",
			fmt.Sprintf("docs/a.md:9: removed key kubernetes.taint named where its section does not quote the warning check-config gives: %q", warning),
			"docs/a.md:10: unknown configuration key kubernetes.nodename: not in config.Keys()",
			fmt.Sprintf("docs/a.md:24: removed key kubernetes.taint.enabled named where its section does not quote the warning check-config gives: %q", warning),
			"docs/keys.md:5: key table lacks psiTrigger",
			"docs/keys.md:" + fmt.Sprint(7+len(c.keys.keys)-len(c.keys.sections)-1) + ": unknown configuration key kubernetes.nodename: not in config.Keys()",
			"docs/keys.md:" + fmt.Sprint(7+len(c.keys.keys)-len(c.keys.sections)-1) + ": unknown configuration key log.lvl: not in config.Keys()",
			"contrib/monitoring/alerts.yaml:6: unknown metric cri_guard_degrade: not a series of cri-guard's or cri-guard-controller's registry",
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("findings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		t.Logf("fixtures: %s; findings:\n%s", st, strings.Join(got, "\n"))
	})
}
