package fleet

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// fleetRow is one line of a phase's table: a figure per node per minute.
type fleetRow struct {
	label   string
	value   func(a *fleetAgg, b byteCount) float64
	kubelet string // the kubelet's default for scale, if it has one
}

var fleetRows = []fleetRow{
	{"watch opens", func(a *fleetAgg, _ byteCount) float64 { return float64(a.Kinds[kindWatch]) }, ""},
	{"lists", func(a *fleetAgg, _ byteCount) float64 { return float64(a.Kinds[kindList]) }, ""},
	{"  of them relists", func(a *fleetAgg, _ byteCount) float64 { return float64(a.Relists) }, ""},
	{"Node writes", func(a *fleetAgg, _ byteCount) float64 { return float64(a.Kinds[kindNodeWrite]) }, "0.2 node status (+6 Lease renewals)"},
	{"Node GETs from etcd", func(a *fleetAgg, _ byteCount) float64 { return float64(a.Kinds[kindNodeGetEtcd]) }, ""},
	{"Node GETs from cache", func(a *fleetAgg, _ byteCount) float64 { return float64(a.Kinds[kindNodeGetCache]) }, ""},
	{"pod status writes", func(a *fleetAgg, _ byteCount) float64 { return float64(a.Kinds[kindPodStatus]) }, ""},
	{"event writes", func(a *fleetAgg, _ byteCount) float64 { return float64(a.Kinds[kindEvent]) }, ""},
	{"other", func(a *fleetAgg, _ byteCount) float64 { return float64(a.Kinds[kindOther]) }, ""},
	{"bytes in (to the API)", func(_ *fleetAgg, b byteCount) float64 { return float64(b.In) }, ""},
	{"bytes out (from the API)", func(_ *fleetAgg, b byteCount) float64 { return float64(b.Out) }, ""},
}

// printFleet prints one table per phase and the restart's relist spread.
func printFleet(out io.Writer, o fleetOptions, res fleetResult) {
	fmt.Fprintf(out, "fleet: %d nodes per fleet, %d Running pods each; one kube-apiserver (watch cache on), audit at Metadata level\n", o.Nodes, o.Pods)
	fmt.Fprintf(out, "  old = %s\n  new = %s\n", o.Binaries[0].Path, o.Binaries[1].Path)
	if c := res.Controller; c != nil {
		fmt.Fprintf(out, "  controller = %s, %d replicas as processes (the Deployment's args but the kubeconfig and metrics address), each with its own token of %s\n", o.Controller, len(c.Replicas), ctlUser)
		for _, r := range c.Replicas {
			fmt.Fprintf(out, "    %s: pid %d, token jti %s, from %s: %s\n", r.Name, r.PID, r.JTI, r.SourceIP, r.Args)
		}
	}
	fmt.Fprintln(out, "figures per node per minute (requests from the audit log, by the node's user; bytes through the fleet's proxy)")
	for _, p := range res.Phases {
		fmt.Fprintf(out, "\nphase %s: %s, kube-apiserver CPU %.1f s (both fleets and the bench)\n", p.Name, p.End.Sub(p.Start).Round(1e9), p.CPUSeconds)
		agg := res.Aggregate.Phases[p.Name]
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "\told\tnew\tkubelet default\t")
		// the start and the wave are one-offs whose length is the bench's:
		// per node in all, not per minute
		per := float64(o.Nodes) * p.minutes()
		switch p.Name {
		case "start":
			per = float64(o.Nodes)
			fmt.Fprintln(out, "(per node IN ALL, not per minute: from the first cri-guard's start to the end of --settle, the first lists included)")
		case "wave":
			per = float64(o.Nodes)
			fmt.Fprintln(out, "(per node of the fleet IN ALL, not per minute: the nodes under pressure and the others, until the last refusal)")
		case "restart":
			fmt.Fprintf(out, "(per minute over the whole phase: the stop (SIGTERM, up to 30 s), --down, the start, then --restart-window; the API was ready again %s after the phase began)\n",
				p.Back.Sub(p.Start).Round(100*time.Millisecond))
		}
		for _, r := range fleetRows {
			var cells []string
			for _, f := range []string{"old", "new"} {
				v := 0.0
				if per > 0 {
					v = r.value(agg[f], p.Bytes[f]) / per
				}
				cells = append(cells, fmtRate(v))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", r.label, cells[0], cells[1], r.kubelet)
		}
		fmt.Fprintf(tw, "requests/s peak (fleet, 1 s)\t%d\t%d\t\t\n", agg["old"].PeakPerSec, agg["new"].PeakPerSec)
		fmt.Fprintf(tw, "nodes with requests\t%d\t%d\t\t\n", agg["old"].NodesActive, agg["new"].NodesActive)
		_ = tw.Flush()
		fmt.Fprintf(out, "requests/s peak on the API server (every user): %d\n", agg["all"].PeakPerSec)
		if p.Name == "wave" {
			printWave(out, res.Wave)
		}
		printCtlPhase(out, o, res, p)
		printRSS(out, res.RSS[p.Name])
		if !p.Back.IsZero() {
			for _, f := range []string{"old", "new"} {
				s := spreadOf(agg[f].RelistAfterBack)
				fmt.Fprintf(out, "restart, %s: %d of %d nodes relisted (%d relists, %.2f per node); first relist per node, s after the API was ready: first %.1f, median %.1f, last %.1f\n",
					f, s.nodes, o.Nodes, s.relists, float64(s.relists)/float64(o.Nodes), s.first, s.median, s.last)
			}
		}
	}
	printLatency(out, res.Controller)
}

func printWave(out io.Writer, ws []waveResult) {
	by := map[string]*[4]int{} // nodes, evicted, refused, admitted
	var errs []string
	for _, w := range ws {
		f, _, _ := strings.Cut(w.Node, "-")
		if by[f] == nil {
			by[f] = &[4]int{}
		}
		c := by[f]
		c[0]++
		if w.Evicted != "" {
			c[1]++
		}
		c[2] += w.Refused
		c[3] += w.Admitted
		if w.Err != "" {
			errs = append(errs, w.Node+": "+w.Err)
		}
	}
	for _, f := range []string{"old", "new"} {
		if c := by[f]; c != nil {
			fmt.Fprintf(out, "wave, %s: %d nodes under pressure, %d evicted a pod, RunPodSandbox of BestEffort pods: %d refused, %d not refused\n", f, c[0], c[1], c[2], c[3])
		}
	}
	for _, e := range errs {
		fmt.Fprintln(out, "  wave error:", e)
	}
}

// fmtRate prints a per-minute figure with the digits it needs.
func fmtRate(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 10000:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}
