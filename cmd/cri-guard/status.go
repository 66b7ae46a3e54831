package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cri-guard/cri-guard/internal/admin"
	"github.com/cri-guard/cri-guard/internal/config"
	"github.com/cri-guard/cri-guard/internal/pressure"
)

// statusTimeout bounds `cri-guard status`.
const statusTimeout = 10 * time.Second

// statusDecisions is how many recent decisions the table shows.
const statusDecisions = 20

// statusCmd is `cri-guard status [--admin PATH] [--json]`: it asks the
// running daemon on its admin socket and prints a table, or the JSON
// document as the daemon sent it.
func statusCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("admin", config.DefaultAdminSocket, "cri-guard's admin socket (adminSocket in the config)")
	asJSON := fs.Bool("json", false, "print the status document as JSON")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: cri-guard status [--admin PATH] [--json]\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	if *asJSON {
		raw, err := admin.FetchRaw(ctx, *path)
		if err != nil {
			fmt.Fprintf(stderr, "cri-guard: %v\n", err)
			return 1
		}
		_, _ = stdout.Write(raw)
		return 0
	}
	st, err := admin.Fetch(ctx, *path)
	if err != nil {
		fmt.Fprintf(stderr, "cri-guard: %v\n", err)
		return 1
	}
	if err := printStatus(stdout, st); err != nil {
		fmt.Fprintf(stderr, "cri-guard: %v\n", err)
		return 1
	}
	return 0
}

// printStatus renders the status as tables for people.
func printStatus(out io.Writer, st admin.Status) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	dry := ""
	if st.DryRun {
		dry = "  DRY RUN (evictions are only logged)"
	}
	fmt.Fprintf(w, "cri-guard %s%s\n", st.Version, dry)
	fmt.Fprintf(w, "runtime:\t%s\t%s\n", st.Runtime.Endpoint, st.Runtime.State)
	if st.Degraded != "" {
		fmt.Fprintf(w, "DEGRADED:\trestore not finished (retrying): %s\n", st.Degraded)
	}
	for _, p := range st.Problems {
		fmt.Fprintf(w, "DEGRADED:\t%s\n", p)
	}
	printState(w, st.Time, st.State)
	if a := st.API; a != nil {
		api := "connected"
		switch {
		case a.LastError != "":
			api = "error: " + a.LastError
		case !a.Synced:
			api = "not synced yet"
		}
		fmt.Fprintf(w, "api server:\tnode %s\t%s\t%d pending\n", a.Node, api, a.Pending)
		if a.Unreported > 0 {
			fmt.Fprintf(w, "unreported:\t%d refusals left to the kubelet's back-off (their owner's rejections over the bound)\n", a.Unreported)
		}
	}
	sampled := "never"
	if !st.SampledAt.IsZero() {
		sampled = fmt.Sprintf("%s (%s ago, %s)", st.SampledAt.Format(time.RFC3339), st.Time.Sub(st.SampledAt).Round(time.Second), st.Source)
	}
	fmt.Fprintf(w, "sampled:\t%s\n", sampled)
	if st.StatsError != "" {
		fmt.Fprintf(w, "stats error:\t%s (figures below are stale, from the last good sample)\n", st.StatsError)
	}
	for _, e := range st.SignalErrors {
		fmt.Fprintf(w, "signal error:\t%s\n", e)
	}
	if h := st.HugePages; h != nil {
		fmt.Fprintf(w, "huge pages:\t%s, %s\n", humanBytes(h.Bytes), map[bool]string{true: "taken off memory.available (kubelet 1.37)", false: "counted as available (kubelet 1.36 and older)"}[h.Subtracted])
	}
	conds := "none"
	if len(st.Conditions) > 0 {
		conds = strings.Join(st.Conditions, ", ")
	}
	fmt.Fprintf(w, "conditions:\t%s\n", conds)
	if len(st.Met) > 0 {
		fmt.Fprintf(w, "acting:\t%s\n", strings.Join(st.Met, "; "))
	}

	fmt.Fprintf(w, "\nSIGNAL\tOBSERVED\tTHRESHOLDS\n")
	for _, s := range st.Signals {
		fmt.Fprintf(w, "%s\t%s\t%s\n", s.Signal, orDash(signalText(s)), thresholdsText(s))
	}

	fmt.Fprintf(w, "\nRANK\tPOD\tQOS\tCRITICAL\tSTATE\tWORKING SET\tREQUEST\n")
	if len(st.Pods) == 0 {
		fmt.Fprintf(w, "-\t(no pods)\n")
	}
	for _, p := range st.Pods {
		rank, ws, req := "-", "-", "-"
		if p.Rank > 0 {
			rank = strconv.Itoa(p.Rank)
		}
		if p.HasStats {
			ws = humanBytes(p.WorkingSetBytes)
			if p.RequestBytes > 0 {
				req = humanBytes(p.RequestBytes)
			}
		}
		fmt.Fprintf(w, "%s\t%s/%s\t%s\t%s\t%s\t%s\t%s\n", rank, p.Namespace, p.Name, p.QOS, yesNo(p.Critical), p.State, ws, req)
	}

	ds := st.Decisions
	if len(ds) > statusDecisions {
		ds = ds[len(ds)-statusDecisions:]
	}
	fmt.Fprintf(w, "\nTIME\tDECISION\tPOD\tSIGNAL\tREASON\tMESSAGE\n")
	if len(ds) == 0 {
		fmt.Fprintf(w, "-\t(none yet)\n")
	}
	for _, d := range ds {
		who := "-"
		if d.Pod != nil {
			who = d.Pod.Namespace + "/" + d.Pod.Name
			if d.Restored {
				who += " (restored)"
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", d.Time.Format(time.RFC3339), d.Kind, who, orDash(d.Signal), orDash(d.Reason), orDash(strings.TrimSpace(d.Message)))
	}
	return w.Flush()
}

// signalText renders an observed signal: bytes for memory, percent for PSI.
func signalText(s admin.Signal) string {
	if s.Observed == "" {
		return ""
	}
	if pressure.Signal(s.Signal).IsPSI() {
		return s.Observed
	}
	return humanBytes(int64(s.Value))
}

func thresholdsText(s admin.Signal) string {
	op := "<"
	if pressure.Signal(s.Signal).IsPSI() {
		op = ">"
	}
	parts := make([]string, 0, len(s.Thresholds))
	for _, t := range s.Thresholds {
		p := t.Kind + " " + op + t.Value
		if strings.HasSuffix(t.Value, "%") && !pressure.Signal(s.Signal).IsPSI() && t.Limit > 0 {
			p += " (" + humanBytes(int64(t.Limit)) + ")"
		}
		if t.GracePeriod != "" {
			p += " grace " + t.GracePeriod
		}
		if t.MinReclaim != "" {
			p += " min-reclaim " + t.MinReclaim
		}
		if t.Crossed {
			p += " CROSSED"
		}
		parts = append(parts, p)
	}
	return orDash(strings.Join(parts, ", "))
}

// humanBytes renders a byte count for people, rounded to one decimal with a
// binary unit: 20Gi, 1.5Mi, 512. It is the one rounding byte formatter; it is
// not resource.Quantity because Quantity is exact and does not round
// (1288486912 is "1258288Ki", 1.5Gi is "1536Mi"): too wide for a table
// column. Messages about thresholds and observations use Quantity
// (pressure.Observation.String), as the kubelet does.
func humanBytes(b int64) string {
	units := []string{"Ki", "Mi", "Gi", "Ti", "Pi"}
	neg := b < 0
	if neg {
		b = -b
	}
	v, unit := float64(b), ""
	for _, u := range units {
		if v < 1024 {
			break
		}
		v, unit = v/1024, u
	}
	s := strconv.FormatFloat(v, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0") + unit
	if neg {
		s = "-" + s
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
