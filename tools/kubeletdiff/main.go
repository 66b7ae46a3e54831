// Command kubeletdiff is the differential test of cri-guard's eviction
// decisions against the kubelet's own eviction manager (k8s.io/kubernetes
// pkg/kubelet/eviction, v1.37.2, unmodified): random nodes, thresholds and
// pods, the same inputs to both, every decision compared.
//
//	go run . -seed 1 -count 300
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"k8s.io/klog/v2"
)

func main() {
	seed := flag.Int64("seed", 1, "first scenario's seed (scenario i uses seed+i)")
	count := flag.Int("count", 300, "number of scenarios")
	examples := flag.Int("examples", 3, "examples printed per cause")
	targeted := flag.Bool("targeted", true, "run the targeted scenarios (targeted.go) before the random ones")
	flag.Parse()
	r, err := run(*seed, *count, *targeted)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeletdiff:", err)
		os.Exit(1)
	}
	r.print(os.Stdout, *examples)
}

// run runs the targeted scenarios, if asked, then count random ones from seed.
func run(seed int64, count int, targeted bool) (*report, error) {
	quietKlog()
	dir, err := os.MkdirTemp("", "kubeletdiff")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	r := newReport()
	if targeted {
		for _, c := range targetedCases() {
			if err := runScenario(c.Scenario, dir, r); err != nil {
				return nil, fmt.Errorf("%s: %w", c.Scenario.Name, err)
			}
		}
	}
	for i := 0; i < count; i++ {
		if err := runScenario(newScenario(seed+int64(i)), dir, r); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// quietKlog silences the kubelet's logging (it logs every pass).
func quietKlog() {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("alsologtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(io.Discard)
}

func (r *report) print(w io.Writer, examples int) {
	fmt.Fprintf(w, "scenarios: %d\n\n", r.Scenarios)
	fmt.Fprintf(w, "%-32s %9s %9s %8s %15s\n", "field", "compared", "agreed", "percent", "not observable")
	for _, f := range fieldOrder {
		t := r.Tallies[f]
		pct := 100.0
		if t.Compared > 0 {
			pct = 100 * float64(t.Agreed) / float64(t.Compared)
		}
		fmt.Fprintf(w, "%-32s %9d %9d %7.2f%% %15d\n", f, t.Compared, t.Agreed, pct, t.NotObservable)
	}
	if len(r.NA) > 0 {
		fmt.Fprintf(w, "\nnot observable through CRI (not counted):\n")
		for _, k := range sortedKeys(r.NA) {
			fmt.Fprintf(w, "  %6d  %s\n", r.NA[k], k)
		}
	}
	groups := map[string][]difference{}
	for _, d := range r.Diffs {
		k := d.Field + "\x00" + d.Cause
		groups[k] = append(groups[k], d)
	}
	if len(groups) == 0 {
		fmt.Fprintf(w, "\nno differences\n")
		return
	}
	fmt.Fprintf(w, "\ndifferences by field and cause (reproduce: go run . -seed SEED -count 1):\n")
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		fi, fj := fieldIndex(keys[i]), fieldIndex(keys[j])
		if fi != fj {
			return fi < fj
		}
		return len(groups[keys[i]]) > len(groups[keys[j]])
	})
	for _, k := range keys {
		ds := groups[k]
		fmt.Fprintf(w, "\n[%s] %d × %s\n", ds[0].Field, len(ds), ds[0].Cause)
		for _, d := range ds[:min(examples, len(ds))] {
			fmt.Fprintf(w, "    seed %d step %d: %s\n", d.Seed, d.Step, strings.ReplaceAll(d.Detail, "\n", "; "))
		}
	}
}

func fieldIndex(key string) int {
	f, _, _ := strings.Cut(key, "\x00")
	for i, x := range fieldOrder {
		if x == f {
			return i
		}
	}
	return len(fieldOrder)
}

func sortedKeys(m map[string]int) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
