package fleet

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/benchutil"
)

// ctlReplica names a replica for the audit attribution: its token's JWT
// ID and the address its proxy connects from.
type ctlReplica struct {
	Name     string `json:"name"`
	PID      int    `json:"pid"`
	JTI      string `json:"jti"`
	SourceIP string `json:"source_ip"`
	Args     string `json:"args"`
}

// ctlReplicaOf is the replica that made r, if its user is the
// controller's: by the token's JWT ID when the API server reports it, else
// by the source address; "unknown" when neither matches.
func ctlReplicaOf(r fleetRequest, reps []ctlReplica) (string, bool) {
	if r.user != ctlUser {
		return "", false
	}
	for _, p := range reps {
		if r.credID != "" && r.credID == "JTI="+p.JTI {
			return p.Name, true
		}
	}
	if r.credID == "" {
		for _, p := range reps {
			if r.sourceIP != "" && r.sourceIP == p.SourceIP {
				return p.Name, true
			}
		}
	}
	return "unknown", true
}

// The roles a replica's request or sample is counted under.
const (
	roleLeader   = "leader"
	roleFollower = "follower"
	roleUnknown  = "unknown" // the controller's user, but no replica of this run
)

func roleName(leading bool) string {
	if leading {
		return roleLeader
	}
	return roleFollower
}

// ctlAgg is what the replica(s) in one role asked in one phase.
type ctlAgg struct {
	// Requests by "verb resource[/subresource]", every response code.
	Requests map[string]int `json:"requests"`
	Total    int            `json:"total"`
	// Errors: responses other than 2xx.
	Errors int `json:"errors"`
	// TaintPatches: successful patches of a Node (the controller patches
	// nothing else of a Node: its taints), and the Nodes they were on.
	TaintPatches     int      `json:"taint_patches"`
	TaintPatchNodes  int      `json:"taint_patch_nodes"`
	Replicas         []string `json:"replicas"` // the replicas that held the role in the phase
	taintPatchedSeen map[string]bool
}

func (a *ctlAgg) add(r fleetRequest, replica string) {
	if a.Requests == nil {
		a.Requests = map[string]int{}
		a.taintPatchedSeen = map[string]bool{}
	}
	res := r.resource
	if r.sub != "" {
		res += "/" + r.sub
	}
	key := r.verb + " " + res
	if r.verb == "watch" && r.kind == kindList {
		// client-go's watch-list: the server sends every object first
		key += " (initial list)"
	}
	a.Requests[key]++
	a.Total++
	ok := r.code >= 200 && r.code < 300
	if !ok {
		a.Errors++
	}
	if ok && r.verb == "patch" && r.resource == "nodes" && r.sub == "" {
		a.TaintPatches++
		if !a.taintPatchedSeen[r.name] {
			a.taintPatchedSeen[r.name] = true
			a.TaintPatchNodes++
		}
	}
	if !slices.Contains(a.Replicas, replica) {
		a.Replicas = append(a.Replicas, replica)
		slices.Sort(a.Replicas)
	}
}

// aggregateCtl counts the controller's requests by phase and by the role
// its replica had when the API server received the request (a replica's
// leader gauge, sampled every second: the request that wins the Lease
// counts under follower, the first after it under leader).
func aggregateCtl(reqs []fleetRequest, phases []fleetPhase, reps []ctlReplica, leaders map[string][]leaderSample) map[string]map[string]*ctlAgg {
	out := map[string]map[string]*ctlAgg{}
	for _, p := range phases {
		out[p.Name] = map[string]*ctlAgg{roleLeader: {}, roleFollower: {}}
	}
	for _, r := range reqs {
		rep, ok := ctlReplicaOf(r, reps)
		if !ok {
			continue
		}
		i := slices.IndexFunc(phases, func(p fleetPhase) bool { return !r.at.Before(p.Start) && r.at.Before(p.End) })
		if i < 0 {
			continue
		}
		role := roleUnknown
		if ls, ok := leaders[rep]; ok {
			role = roleName(roleAt(ls, r.at))
		}
		a := out[phases[i].Name][role]
		if a == nil {
			a = &ctlAgg{}
			out[phases[i].Name][role] = a
		}
		a.add(r, rep)
	}
	return out
}

// rssStat sums up VmRSS samples.
type rssStat struct {
	Samples int   `json:"samples"`
	Median  int64 `json:"median_bytes"`
	Max     int64 `json:"max_bytes"`
}

func rssStatOf(v []int64) rssStat {
	if len(v) == 0 {
		return rssStat{}
	}
	v = slices.Clone(v)
	slices.Sort(v)
	m := v[len(v)/2]
	if len(v)%2 == 0 {
		m = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return rssStat{Samples: len(v), Median: m, Max: v[len(v)-1]}
}

// aggregateRSS is, per phase, VmRSS by group: the controllers by their
// role at the sample (leader, follower), the nodes' cri-guards by fleet
// (every node's samples together).
func aggregateRSS(samples []rssSample, phases []fleetPhase, fleets []string) map[string]map[string]rssStat {
	vals := map[string]map[string][]int64{}
	for _, s := range samples {
		i := slices.IndexFunc(phases, func(p fleetPhase) bool { return !s.at.Before(p.Start) && s.at.Before(p.End) })
		if i < 0 {
			continue
		}
		g := s.group
		if !slices.Contains(fleets, g) {
			g = roleName(s.leading)
		}
		p := phases[i].Name
		if vals[p] == nil {
			vals[p] = map[string][]int64{}
		}
		vals[p][g] = append(vals[p][g], s.rss)
	}
	out := map[string]map[string]rssStat{}
	for p, gs := range vals {
		out[p] = map[string]rssStat{}
		for g, v := range gs {
			out[p][g] = rssStatOf(v)
		}
	}
	return out
}

// taintEpisode is one change of a Node's condition and the taint that
// followed it, both as the bench's watch saw them.
type taintEpisode struct {
	Node    string    `json:"node"`
	Action  string    `json:"action"` // applied: the condition turned True; removed: it left True
	CondAt  time.Time `json:"condition_seen"`
	TaintAt time.Time `json:"taint_seen,omitzero"` // zero: not seen by the end
	Seconds float64   `json:"seconds,omitempty"`
	// Together: the watch delivered the condition's change and the taint's
	// in one event (after a relist): no latency to measure.
	Together bool `json:"together,omitempty"`
}

// taintEpisodes pairs, per Node, each change of the condition with the
// taint's change that follows: the condition turning True with the taint
// appearing, leaving True with the taint going. A condition that flips
// back before the taint followed starts a new episode; the old one stays
// unmatched.
func taintEpisodes(obs []nodeObs) []taintEpisode {
	obs = slices.Clone(obs)
	sort.SliceStable(obs, func(i, j int) bool { return obs[i].at.Before(obs[j].at) })
	type state struct {
		cond, tainted bool
		open          int // index in out of the episode waiting for the taint, -1: none
	}
	st := map[string]*state{}
	var out []taintEpisode
	for _, o := range obs {
		s := st[o.node]
		if s == nil {
			// the first sight (the watch's initial list) is the state, not a change
			st[o.node] = &state{cond: o.cond, tainted: o.tainted, open: -1}
			continue
		}
		if o.cond != s.cond {
			action := "removed"
			if o.cond {
				action = "applied"
			}
			ep := taintEpisode{Node: o.node, Action: action, CondAt: o.at}
			if o.tainted == o.cond && s.tainted != o.tainted {
				ep.TaintAt, ep.Together = o.at, true
				s.open = -1
			} else {
				s.open = len(out)
			}
			out = append(out, ep)
		} else if s.open >= 0 && o.tainted == o.cond && s.tainted != o.tainted {
			ep := &out[s.open]
			ep.TaintAt = o.at
			ep.Seconds = o.at.Sub(ep.CondAt).Seconds()
			s.open = -1
		}
		s.cond, s.tainted = o.cond, o.tainted
	}
	return out
}

// latencyStat sums up the episodes of one action.
type latencyStat struct {
	N        int     `json:"n"`
	Median   float64 `json:"median_seconds"`
	Max      float64 `json:"max_seconds"`
	Together int     `json:"together"` // seen in one event, not in N
	NotSeen  int     `json:"not_seen"` // the taint never followed by the end
	Episodes int     `json:"episodes"` // all of them
}

func latencyOf(eps []taintEpisode, action string) latencyStat {
	var s latencyStat
	var v []float64
	for _, e := range eps {
		if e.Action != action {
			continue
		}
		s.Episodes++
		switch {
		case e.Together:
			s.Together++
		case e.TaintAt.IsZero():
			s.NotSeen++
		default:
			v = append(v, e.Seconds)
		}
	}
	s.N = len(v)
	if len(v) == 0 {
		return s
	}
	slices.Sort(v)
	s.Median = v[len(v)/2]
	if len(v)%2 == 0 {
		s.Median = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	s.Max = v[len(v)-1]
	return s
}

// ctlResult is the controller's part of the JSON output.
type ctlResult struct {
	Replicas []ctlReplica                     `json:"replicas"`
	Phases   map[string]map[string]*ctlAgg    `json:"phases"` // phase -> role; each replica's bytes are in the phases' bytes, by its name
	Latency  map[string]latencyStat           `json:"condition_to_taint"`
	Episodes []taintEpisode                   `json:"episodes"`
	Leaders  map[string][]ctlLeaderTransition `json:"leader_transitions"` // replica -> its gauge's changes
}

// ctlLeaderTransition is a change of a replica's leader gauge.
type ctlLeaderTransition struct {
	At      time.Time `json:"at"`
	Leading bool      `json:"leading"`
}

func leaderTransitions(ls []leaderSample) []ctlLeaderTransition {
	var out []ctlLeaderTransition
	for i, l := range ls {
		if i == 0 || l.leading != ls[i-1].leading {
			out = append(out, ctlLeaderTransition{At: l.at, Leading: l.leading})
		}
	}
	return out
}

// ctlRequestOrder puts the rows the controller is expected to make first.
var ctlRequestOrder = []string{"update leases", "get leases", "create leases", "list nodes", "watch nodes (initial list)", "watch nodes", "patch nodes"}

// printCtlPhase prints a phase's controller figures beside a node's: its
// requests by verb and resource per role, its taint patches, and VmRSS.
func printCtlPhase(out io.Writer, o fleetOptions, res fleetResult, p fleetPhase) {
	c := res.Controller
	if c == nil {
		return
	}
	agg := c.Phases[p.Name]
	mins := p.minutes()
	fmt.Fprintf(out, "controller (user %s, 2 replicas; leader: the replica leading when the request came): requests in the phase and per minute\n", ctlUser)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tleader\t/min\tfollower\t/min\t")
	keys := map[string]bool{}
	for _, a := range agg {
		for k := range a.Requests {
			keys[k] = true
		}
	}
	var rows []string
	for _, k := range ctlRequestOrder {
		if keys[k] {
			rows = append(rows, k)
			delete(keys, k)
		}
	}
	var rest []string
	for k := range keys {
		rest = append(rest, k)
	}
	slices.Sort(rest)
	rows = append(rows, rest...)
	get := func(role string) *ctlAgg {
		if a := agg[role]; a != nil {
			return a
		}
		return &ctlAgg{}
	}
	L, F := get(roleLeader), get(roleFollower)
	perMin := func(n int) string {
		if mins <= 0 {
			return "-"
		}
		return fmtRate(float64(n) / mins)
	}
	for _, k := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t\n", k, L.Requests[k], perMin(L.Requests[k]), F.Requests[k], perMin(F.Requests[k]))
	}
	fmt.Fprintf(tw, "all\t%d\t%s\t%d\t%s\t\n", L.Total, perMin(L.Total), F.Total, perMin(F.Total))
	fmt.Fprintf(tw, "  of them not 2xx\t%d\t\t%d\t\t\n", L.Errors, F.Errors)
	fmt.Fprintf(tw, "replicas in the role\t%s\t\t%s\t\t\n", strings.Join(L.Replicas, ","), strings.Join(F.Replicas, ","))
	_ = tw.Flush()
	if u := agg[roleUnknown]; u != nil {
		fmt.Fprintf(out, "  the controller's user from no replica of this run: %d requests\n", u.Total)
	}
	// a node's, for scale
	var node []string
	for _, f := range []string{"old", "new"} {
		if a := res.Aggregate.Phases[p.Name][f]; a != nil && o.Nodes > 0 && mins > 0 {
			n := 0
			for _, k := range a.Kinds {
				n += k
			}
			node = append(node, fmt.Sprintf("%s %s", f, fmtRate(float64(n)/float64(o.Nodes)/mins)))
		}
	}
	fmt.Fprintf(out, "  for scale, a node's cri-guard, all requests per minute: %s\n", strings.Join(node, ", "))
	fmt.Fprintf(out, "  taint patches (patch nodes, 2xx): leader %d on %d Nodes, follower %d\n", L.TaintPatches, L.TaintPatchNodes, F.TaintPatches)
	var bs []string
	for _, r := range c.Replicas {
		if b, ok := p.Bytes[r.Name]; ok {
			bs = append(bs, fmt.Sprintf("%s in %d out %d", r.Name, b.In, b.Out))
		}
	}
	if len(bs) > 0 {
		fmt.Fprintf(out, "  bytes through each replica's proxy: %s\n", strings.Join(bs, "; "))
	}
}

// printRSS prints a phase's VmRSS: the controllers by role, the nodes'
// cri-guards by fleet.
func printRSS(out io.Writer, gs map[string]rssStat) {
	var cells []string
	for _, g := range []string{roleLeader, roleFollower, "old", "new"} {
		s, ok := gs[g]
		if !ok || s.Samples == 0 {
			continue
		}
		what := "controller " + g
		if g == "old" || g == "new" {
			what = "a node's cri-guard, " + g
		}
		cells = append(cells, fmt.Sprintf("%s %s / %s (%d samples)", what, benchutil.MiB(s.Median), benchutil.MiB(s.Max), s.Samples))
	}
	if len(cells) > 0 {
		fmt.Fprintf(out, "  VmRSS MiB, median / max: %s\n", strings.Join(cells, "; "))
	}
}

// printLatency prints the condition→taint latencies.
func printLatency(out io.Writer, c *ctlResult) {
	if c == nil {
		return
	}
	fmt.Fprintln(out, "\ncondition → taint, both seen on the bench's watch of the Nodes (from the event with the condition's change to the event with the taint's):")
	for _, a := range []string{"applied", "removed"} {
		s := c.Latency[a]
		fmt.Fprintf(out, "  %s: %d episodes, %d measured: median %.3f s, max %.3f s; in one event %d, taint not followed %d\n",
			a, s.Episodes, s.N, s.Median, s.Max, s.Together, s.NotSeen)
	}
	for _, r := range c.Replicas {
		name, ts := r.Name, c.Leaders[r.Name]
		var cells []string
		for _, t := range ts {
			cells = append(cells, fmt.Sprintf("%s %s", t.At.UTC().Format("15:04:05"), roleName(t.Leading)))
		}
		fmt.Fprintf(out, "  %s's leader gauge: %s\n", name, strings.Join(cells, ", "))
	}
}
