package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/yaml"

	"github.com/cri-guard/cri-guard/internal/evictor"
	"github.com/cri-guard/cri-guard/internal/metrics"
	"github.com/cri-guard/cri-guard/internal/pressure"
)

var monitoringDir = filepath.Join(contribDir, "monitoring")

// externalSeries are the series the alerts and the dashboard read that
// cri-guard does not export, with the labels they select on: Prometheus'
// own up, and the kubelet's cAdvisor OOM counter (cri-guard has no OOM
// counter of its own).
var externalSeries = map[string][]string{
	"up":                         {"job", "instance"},
	"container_oom_events_total": {"job", "instance", "container", "pod", "namespace", "id", "image", "name"},
}

// targetLabels are added by Prometheus to every scraped series.
var targetLabels = []string{"job", "instance"}

// exportedSeries returns every series name cri-guard's registry serves,
// with its label names (exportedFamilies). Histograms and summaries are
// listed under the names Prometheus stores them as.
func exportedSeries(t *testing.T) map[string][]string {
	t.Helper()
	return seriesOf(exportedFamilies(t))
}

// exportedFamilies gathers cri-guard's registry as run.go builds it, each
// event-driven series fed once and the collector given every source, so
// that each family has a child.
func exportedFamilies(t *testing.T) []*dto.MetricFamily {
	t.Helper()
	m := metrics.New()
	m.Observe("/runtime.v1.RuntimeService/StopPodSandbox", time.Millisecond, status.Error(codes.Unavailable, "down"))
	for _, k := range []evictor.Kind{evictor.KindAdmit, evictor.KindRefuse, evictor.KindEvict, evictor.KindDryRun,
		evictor.KindEvictFailed, evictor.KindGraceCut, evictor.KindUnable, evictor.KindStatsError} {
		m.Decided(evictor.Decision{Kind: k, Signal: string(pressure.SignalMemoryAvailable), Reason: "r"})
	}
	m.APIWrite("event", "ok")
	st := evictor.Status{
		SampledAt: time.Unix(1, 0),
		Observed: map[pressure.Signal]pressure.Observation{
			pressure.SignalMemoryAvailable: {Signal: pressure.SignalMemoryAvailable, Available: 1},
		},
		Thresholds: []pressure.ThresholdState{{Threshold: pressure.Threshold{Signal: pressure.SignalMemoryAvailable, Hard: true}, Limit: 1, LimitKnown: true}},
	}
	m.Registry().MustRegister(metrics.NewCollector(metrics.StateSource{
		Snapshot:       func() evictor.Status { return st },
		Connected:      func() bool { return true },
		Degraded:       func() bool { return false },
		Parts:          func() []string { return []string{"api: no kubeconfig"} },
		Wakeups:        func() map[string]uint64 { return map[string]uint64{"tick": 1} },
		StoreAvailable: func() bool { return true },
		Unsaved:        func() int { return 0 },
	}))
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// seriesOf returns the series of the families, by the names Prometheus
// stores them as, with their label names.
func seriesOf(mfs []*dto.MetricFamily) map[string][]string {
	out := map[string][]string{}
	for _, mf := range mfs {
		var labels []string
		for _, mm := range mf.GetMetric() {
			for _, lp := range mm.GetLabel() {
				if !slices.Contains(labels, lp.GetName()) {
					labels = append(labels, lp.GetName())
				}
			}
		}
		name := mf.GetName()
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM:
			out[name+"_bucket"] = append(slices.Clone(labels), "le")
			out[name+"_sum"], out[name+"_count"] = labels, labels
		case dto.MetricType_SUMMARY:
			out[name] = append(slices.Clone(labels), "quantile")
			out[name+"_sum"], out[name+"_count"] = labels, labels
		default:
			out[name] = labels
		}
	}
	return out
}

// promqlFuncs are the PromQL functions and aggregations the files may call,
// and Grafana's label_values.
var promqlFuncs = strings.Fields(`abs absent absent_over_time avg avg_over_time bottomk ceil changes clamp
	clamp_max clamp_min count count_over_time count_values delta deriv exp floor group
	histogram_quantile idelta increase irate label_join label_replace last_over_time ln log10
	log2 max max_over_time min min_over_time predict_linear present_over_time quantile
	quantile_over_time rate resets round scalar sort sort_desc sqrt stddev stdvar sum
	sum_over_time time timestamp topk vector label_values`)

var promqlKeywords = strings.Fields(`and or unless bool offset by without on ignoring group_left group_right`)

var (
	labelValues = regexp.MustCompile(`label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)`)
	stringLit   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	rangeSel    = regexp.MustCompile(`\[[^\]]*\]`)
	grouping    = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	selector    = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{([^}]*)\}`)
	matcher     = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)`)
	identifier  = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	callParen   = regexp.MustCompile(`^\s*\(`)
)

// checkExpr returns what in expr is not a series of known (or a label it
// selects on that the series does not have, or a function PromQL lacks).
func checkExpr(expr string, known map[string][]string) []string {
	var bad []string
	e := stringLit.ReplaceAllString(expr, `""`)
	// Grafana's label_values(selector, label): the label is not a series
	e = labelValues.ReplaceAllString(e, "label_values($1)")
	e = rangeSel.ReplaceAllString(e, "")
	for _, m := range selector.FindAllStringSubmatch(e, -1) {
		labels, ok := known[m[1]]
		if m[1] == "" || !ok {
			continue // reported below as an unknown name
		}
		for _, l := range matcher.FindAllStringSubmatch(m[2], -1) {
			if !slices.Contains(labels, l[1]) && !slices.Contains(targetLabels, l[1]) {
				bad = append(bad, fmt.Sprintf("label %q of %s", l[1], m[1]))
			}
		}
	}
	e = selector.ReplaceAllString(e, "$1")
	e = grouping.ReplaceAllString(e, "")
	for _, loc := range identifier.FindAllStringIndex(e, -1) {
		if loc[0] > 0 && strings.ContainsAny(e[loc[0]-1:loc[0]], "0123456789.$") {
			continue // a number's exponent or unit, a template variable
		}
		name, call := e[loc[0]:loc[1]], callParen.MatchString(e[loc[1]:])
		_, isSeries := known[name]
		switch {
		case call && !slices.Contains(promqlFuncs, name):
			bad = append(bad, "function "+name)
		case call, slices.Contains(promqlKeywords, name):
		case !isSeries:
			bad = append(bad, "series "+name)
		}
	}
	return bad
}

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert string `json:"alert"`
			Expr  string `json:"expr"`
		} `json:"rules"`
	} `json:"groups"`
}

func readRules(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(monitoringDir, "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatal(err)
	}
	if len(rf.Groups) == 0 {
		t.Fatal("alerts.yaml: no rule groups")
	}
	return rf
}

// dashboardExprs returns every query of the dashboard: the panels' targets
// and the template variables' queries, wherever they are nested.
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(monitoringDir, "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d any
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				if s, ok := c.(string); ok && (k == "expr" || k == "definition" || (k == "query" && strings.Contains(path, "templating"))) {
					if k != "query" || strings.Contains(s, "(") {
						out[path+"."+k] = s
					}
				}
				walk(path+"."+k, c)
			}
		case []any:
			for i, c := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), c)
			}
		}
	}
	walk("", d)
	return out
}

// TestMonitoringSeries: every series the alerts and the dashboard read is
// one cri-guard exports (or one of externalSeries), with the labels they
// select on; a misspelt name or label fails here rather than as an alert
// that can never fire.
func TestMonitoringSeries(t *testing.T) {
	known := exportedSeries(t)
	for n, l := range externalSeries {
		known[n] = l
	}
	exprs := map[string]string{}
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			exprs["alerts.yaml "+r.Alert] = r.Expr
		}
	}
	dash := dashboardExprs(t)
	if len(dash) < 10 {
		t.Fatalf("dashboard.json: %d queries found", len(dash))
	}
	for k, v := range dash {
		exprs["dashboard.json "+k] = v
	}
	for where, e := range exprs {
		if bad := checkExpr(e, known); len(bad) > 0 {
			t.Errorf("%s: %s: not exported: %s", where, e, strings.Join(bad, ", "))
		}
	}
}

// TestMonitoringCheckExpr: the check itself finds a misspelt series, a
// label the series lacks and an unknown function, and passes good ones.
func TestMonitoringCheckExpr(t *testing.T) {
	known := exportedSeries(t)
	for _, tc := range []struct {
		name, expr string
		bad        []string
	}{
		{"good", `sum by (instance, op) (increase(cri_guard_api_writes_total{op=~"node-condition|node-taint", result="error"}[15m])) > 0`, nil},
		{"histogram", `histogram_quantile(0.99, sum by (le) (rate(cri_guard_cri_request_duration_seconds_bucket[5m])))`, nil},
		{"misspelt series", `increase(cri_guard_evictons_total[5m]) > 0`, []string{"series cri_guard_evictons_total"}},
		{"misspelt in a string is not a series", `cri_guard_degraded{part="cri_guard_nothing"}`, nil},
		{"label the series lacks", `cri_guard_evictions_total{reason="x"}`, []string{`label "reason" of cri_guard_evictions_total`}},
		{"unknown function", `rates(cri_guard_evictions_total[5m])`, []string{"function rates"}},
		{"histogram base name is not a series", `cri_guard_cri_request_duration_seconds`, []string{"series cri_guard_cri_request_duration_seconds"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := checkExpr(tc.expr, known); !slices.Equal(got, tc.bad) {
				t.Errorf("checkExpr(%s) = %q, want %q", tc.expr, got, tc.bad)
			}
		})
	}
}

// TestMonitoringAlertsTested: every alert has a case in alerts_test.yaml
// that expects it to fire, so promtool test rules covers each expression.
func TestMonitoringAlertsTested(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(monitoringDir, "alerts_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(b, &tf); err != nil {
		t.Fatal(err)
	}
	fires := map[string]bool{}
	for _, tc := range tf.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
		}
	}
	var untested []string
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert != "" && !fires[r.Alert] {
				untested = append(untested, r.Alert)
			}
		}
	}
	sort.Strings(untested)
	if len(untested) > 0 {
		t.Errorf("alerts with no test that fires them in alerts_test.yaml: %s", strings.Join(untested, ", "))
	}
}

// prometheusRuleHead starts prometheusrule.yaml; alerts.yaml follows,
// indented, as the spec.
const prometheusRuleHead = `# The rules of alerts.yaml as a PrometheusRule for the Prometheus Operator
# (kubectl apply -n monitoring -f prometheusrule.yaml; add the labels your
# Prometheus' ruleSelector asks for). Generated from alerts.yaml, do not
# edit: make monitoring-rule.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: cri-guard
  labels:
    app.kubernetes.io/name: cri-guard
spec:
`

// TestMonitoringPrometheusRule: the rule file is a PrometheusRule's spec as
// it is (its only top-level key is groups), and prometheusrule.yaml is that
// object: alerts.yaml under spec, byte for byte, so the two cannot differ
// (CRI_GUARD_UPDATE_MONITORING=1 writes it again).
func TestMonitoringPrometheusRule(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(monitoringDir, "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]any
	if err := yaml.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(top))
	for k := range top {
		keys = append(keys, k)
	}
	if !slices.Equal(keys, []string{"groups"}) {
		t.Fatalf("alerts.yaml top-level keys %q, want only groups", keys)
	}
	wrapped := prometheusRuleHead
	for _, line := range strings.SplitAfter(string(b), "\n") {
		switch line {
		case "":
		case "\n":
			wrapped += line
		default:
			wrapped += "  " + line
		}
	}
	path := filepath.Join(monitoringDir, "prometheusrule.yaml")
	if os.Getenv("CRI_GUARD_UPDATE_MONITORING") == "1" {
		if err := os.WriteFile(path, []byte(wrapped), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	onDisk, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(onDisk) != wrapped {
		t.Errorf("%s is not alerts.yaml wrapped as a PrometheusRule: make monitoring-rule", path)
	}
	var pr struct {
		APIVersion string `json:"apiVersion"`
		Kind       string
		Metadata   struct {
			Name   string
			Labels map[string]string
		}
		Spec map[string]any
	}
	if err := yaml.UnmarshalStrict(onDisk, &pr); err != nil {
		t.Fatal(errors.Join(errors.New("prometheusrule.yaml"), err))
	}
	var spec map[string]any
	if err := yaml.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" || pr.Metadata.Name == "" || !reflect.DeepEqual(pr.Spec, spec) {
		t.Errorf("prometheusrule.yaml: %s %s %q, spec equal to alerts.yaml: %v", pr.APIVersion, pr.Kind, pr.Metadata.Name, reflect.DeepEqual(pr.Spec, spec))
	}
}
