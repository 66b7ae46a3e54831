package metrics

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// gatherText renders the named families of g in the text format.
func gatherText(t *testing.T, g prometheus.Gatherer, names ...string) string {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if slices.Contains(names, mf.GetName()) {
			if err := enc.Encode(mf); err != nil {
				t.Fatal(err)
			}
		}
	}
	return buf.String()
}

// compareText fails unless g's families named in names render as want.
func compareText(t *testing.T, g prometheus.Gatherer, want string, names ...string) {
	t.Helper()
	got := gatherText(t, g, names...)
	if strings.TrimSpace(got) != strings.TrimSpace(want) {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

// collectorText registers c alone and renders it.
func collectorText(t *testing.T, c prometheus.Collector, want string, names ...string) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	compareText(t, reg, want, names...)
}

// value reads a counter or gauge.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	switch {
	case d.Counter != nil:
		return d.Counter.GetValue()
	case d.Gauge != nil:
		return d.Gauge.GetValue()
	}
	t.Fatalf("not a counter or gauge: %v", &d)
	return 0
}
