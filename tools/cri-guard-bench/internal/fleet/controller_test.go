package fleet

import (
	"encoding/base64"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// auditLine is an audit event as kube-apiserver writes it at Metadata
// level for a request of a ServiceAccount token (user.extra names the
// token by its JWT ID) or of a node.
func auditLine(id, stage, verb, uri, user, extra, src, resource, sub, name string, code int, at time.Time) string {
	ex := ""
	if extra != "" {
		ex = fmt.Sprintf(`,"extra":{"authentication.kubernetes.io/credential-id":[%q]}`, extra)
	}
	obj := fmt.Sprintf(`{"resource":%q,"namespace":"kube-system","name":%q,"apiGroup":"coordination.k8s.io","apiVersion":"v1"}`, resource, name)
	if sub != "" {
		obj = fmt.Sprintf(`{"resource":%q,"name":%q,"apiVersion":"v1","subresource":%q}`, resource, name, sub)
	}
	return fmt.Sprintf(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":%q,"stage":%q,"requestURI":%q,"verb":%q,`+
		`"user":{"username":%q,"uid":"8e2c","groups":["system:serviceaccounts","system:serviceaccounts:kube-system","system:authenticated"]%s},`+
		`"sourceIPs":[%q],"userAgent":"cri-guard-controller","objectRef":%s,"responseStatus":{"metadata":{},"code":%d},`+
		`"requestReceivedTimestamp":%q,"stageTimestamp":%q}`,
		id, stage, uri, verb, user, ex, src, obj, code, at.Format(time.RFC3339Nano), at.Add(3*time.Millisecond).Format(time.RFC3339Nano))
}

var testReplicas = []ctlReplica{
	{Name: "ctl-0", JTI: "0b0e8e5a-6a51-4b57-9d3e-1c5c8c0d1a01", SourceIP: "127.0.0.2"},
	{Name: "ctl-1", JTI: "5f7a2b1c-0d3e-4f60-8a9b-2c4d6e8f0a02", SourceIP: "127.0.0.3"},
}

func TestCtlReplicaOfAudit(t *testing.T) {
	at := time.Date(2026, 12, 4, 15, 0, 0, 0, time.UTC)
	lines := []string{
		// ctl-0's renewal, named by its token
		auditLine("a1", "ResponseComplete", "update", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/cri-guard-controller?timeout=5s",
			ctlUser, "JTI="+testReplicas[0].JTI, "127.0.0.2", "leases", "", "cri-guard-controller", 200, at),
		// ctl-1's token, from ctl-0's address: the token wins
		auditLine("a2", "ResponseComplete", "get", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/cri-guard-controller?timeout=5s",
			ctlUser, "JTI="+testReplicas[1].JTI, "127.0.0.2", "leases", "", "cri-guard-controller", 200, at),
		// no credential ID: by the source address
		auditLine("a3", "ResponseComplete", "get", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/cri-guard-controller?timeout=5s",
			ctlUser, "", "127.0.0.3", "leases", "", "cri-guard-controller", 200, at),
		// another token of the controller's ServiceAccount
		auditLine("a4", "ResponseComplete", "get", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/cri-guard-controller?timeout=5s",
			ctlUser, "JTI=11111111-2222-3333-4444-555555555555", "127.0.0.2", "leases", "", "cri-guard-controller", 200, at),
		// a node
		auditLine("a5", "ResponseComplete", "patch", "/api/v1/nodes/new-0/status?timeout=10s",
			"system:node:new-0", "", "127.0.0.1", "nodes", "status", "new-0", 200, at),
	}
	reqs, err := readAudit(strings.NewReader(strings.Join(lines, "\n")), newRequestDedup())
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != len(lines) {
		t.Fatalf("%d requests from %d lines", len(reqs), len(lines))
	}
	want := []struct {
		replica string
		ok      bool
	}{{"ctl-0", true}, {"ctl-1", true}, {"ctl-1", true}, {"unknown", true}, {"", false}}
	for i, w := range want {
		got, ok := ctlReplicaOf(reqs[i], testReplicas)
		if got != w.replica || ok != w.ok {
			t.Errorf("line %d (%s %s from %s, %q): replica %q %v, want %q %v", i+1, reqs[i].verb, reqs[i].resource, reqs[i].sourceIP, reqs[i].credID, got, ok, w.replica, w.ok)
		}
	}
	if reqs[0].name != "cri-guard-controller" {
		t.Errorf("object name %q, want the Lease's", reqs[0].name)
	}
}

func TestAggregateCtl(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 15, 0, 0, 0, time.UTC)
	phases := []fleetPhase{
		{Name: "quiet", Start: t0, End: t0.Add(2 * time.Minute)},
		{Name: "restart", Start: t0.Add(2 * time.Minute), End: t0.Add(4 * time.Minute)},
	}
	// ctl-0 leads until 2m30s, ctl-1 from 2m40s
	leaders := map[string][]leaderSample{
		"ctl-0": {{t0, true}, {t0.Add(150 * time.Second), false}},
		"ctl-1": {{t0, false}, {t0.Add(160 * time.Second), true}},
	}
	req := func(rep int, at time.Duration, verb, res, name string, code int) fleetRequest {
		return fleetRequest{at: t0.Add(at), user: ctlUser, credID: "JTI=" + testReplicas[rep].JTI, verb: verb, resource: res, name: name, code: code}
	}
	var reqs []fleetRequest
	// quiet: ctl-0 renews every 2 s, ctl-1 tries every 2 s
	for s := time.Duration(0); s < 2*time.Minute; s += 2 * time.Second {
		reqs = append(reqs, req(0, s, "update", "leases", "cri-guard-controller", 200), req(1, s+time.Second, "get", "leases", "cri-guard-controller", 200))
	}
	reqs = append(reqs,
		req(0, 10*time.Second, "patch", "nodes", "new-0", 200),
		req(0, 11*time.Second, "patch", "nodes", "new-0", 200),
		req(0, 12*time.Second, "patch", "nodes", "new-1", 200),
		req(0, 13*time.Second, "patch", "nodes", "new-2", 422), // refused: not a taint patch that took
		// the informer's watch-list, then a watch from its resourceVersion
		fleetRequest{at: t0.Add(14 * time.Second), user: ctlUser, credID: "JTI=" + testReplicas[1].JTI, verb: "watch", resource: "nodes", code: 200, kind: kindList},
		fleetRequest{at: t0.Add(15 * time.Second), user: ctlUser, credID: "JTI=" + testReplicas[1].JTI, verb: "watch", resource: "nodes", code: 200, kind: kindWatch},
		// restart: ctl-0's failed renewal while it still leads, ctl-1's
		// take-over after its gauge turned
		req(0, 140*time.Second, "update", "leases", "cri-guard-controller", 500),
		req(1, 170*time.Second, "update", "leases", "cri-guard-controller", 200),
		req(0, 170*time.Second, "get", "leases", "cri-guard-controller", 200),
		// a node's request, and one outside every phase
		fleetRequest{at: t0.Add(time.Second), user: "system:node:new-0", verb: "patch", resource: "nodes", sub: "status", code: 200},
		req(0, 5*time.Minute, "update", "leases", "cri-guard-controller", 200),
	)
	agg := aggregateCtl(reqs, phases, testReplicas, leaders)
	q := agg["quiet"]
	if got := q[roleLeader].Requests["update leases"]; got != 60 {
		t.Errorf("quiet: leader's Lease renewals %d, want 60", got)
	}
	if got := q[roleFollower].Requests["get leases"]; got != 60 {
		t.Errorf("quiet: follower's Lease GETs %d, want 60", got)
	}
	if q[roleLeader].Total != 64 || q[roleFollower].Total != 62 {
		t.Errorf("quiet: totals leader %d follower %d, want 64 and 62", q[roleLeader].Total, q[roleFollower].Total)
	}
	if f := q[roleFollower].Requests; f["watch nodes (initial list)"] != 1 || f["watch nodes"] != 1 {
		t.Errorf("quiet: follower's watches %v, want the watch-list apart from the watch", f)
	}
	if q[roleLeader].TaintPatches != 3 || q[roleLeader].TaintPatchNodes != 2 || q[roleLeader].Errors != 1 {
		t.Errorf("quiet: taint patches %d on %d nodes, %d errors; want 3 on 2, 1", q[roleLeader].TaintPatches, q[roleLeader].TaintPatchNodes, q[roleLeader].Errors)
	}
	if !reflect.DeepEqual(q[roleLeader].Replicas, []string{"ctl-0"}) || !reflect.DeepEqual(q[roleFollower].Replicas, []string{"ctl-1"}) {
		t.Errorf("quiet: replicas leader %v follower %v", q[roleLeader].Replicas, q[roleFollower].Replicas)
	}
	r := agg["restart"]
	if r[roleLeader].Requests["update leases"] != 2 || r[roleLeader].Errors != 1 || !reflect.DeepEqual(r[roleLeader].Replicas, []string{"ctl-0", "ctl-1"}) {
		t.Errorf("restart: leader %+v, want both replicas' renewals (2, one failed)", r[roleLeader])
	}
	if r[roleFollower].Requests["get leases"] != 1 || !reflect.DeepEqual(r[roleFollower].Replicas, []string{"ctl-0"}) {
		t.Errorf("restart: follower %+v, want ctl-0's one GET after it lost the Lease", r[roleFollower])
	}
}

func TestRoleAt(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 15, 0, 0, 0, time.UTC)
	ls := []leaderSample{{t0, true}, {t0.Add(time.Second), true}, {t0.Add(2 * time.Second), false}}
	for _, c := range []struct {
		at   time.Duration
		want bool
	}{{-time.Second, true}, {0, true}, {1500 * time.Millisecond, true}, {2 * time.Second, false}, {time.Hour, false}} {
		if got := roleAt(ls, t0.Add(c.at)); got != c.want {
			t.Errorf("roleAt(%v) = %v, want %v", c.at, got, c.want)
		}
	}
	if roleAt(nil, t0) {
		t.Error("no samples: leading")
	}
}

func TestVmRSS(t *testing.T) {
	status := "Name:\tcri-guard-contr\nUmask:\t0022\nState:\tS (sleeping)\nVmPeak:\t 1291884 kB\nVmHWM:\t   31240 kB\nVmRSS:\t   28764 kB\nRssAnon:\t   12316 kB\nThreads:\t9\n"
	got, err := vmRSS(strings.NewReader(status))
	if err != nil || got != 28764*1024 {
		t.Errorf("vmRSS = %d, %v; want %d", got, err, 28764*1024)
	}
	if _, err := vmRSS(strings.NewReader("Name:\tkthreadd\nState:\tS (sleeping)\n")); err == nil {
		t.Error("no VmRSS line: no error")
	}
	if _, err := vmRSS(strings.NewReader("VmRSS:\t 28764 MB\n")); err == nil {
		t.Error("a unit other than kB: no error")
	}
}

func TestLeaderGauge(t *testing.T) {
	page := `# HELP cri_guard_controller_leader 1 while this replica holds the Lease and reconciles, else 0
# TYPE cri_guard_controller_leader gauge
cri_guard_controller_leader 1
# HELP cri_guard_controller_leader_changes_total x
cri_guard_controller_leader_changes_total 3
`
	if l, err := leaderGauge(strings.NewReader(page)); err != nil || !l {
		t.Errorf("leader page: %v, %v", l, err)
	}
	if l, err := leaderGauge(strings.NewReader(strings.Replace(page, "\ncri_guard_controller_leader 1\n", "\ncri_guard_controller_leader 0\n", 1))); err != nil || l {
		t.Errorf("follower page: %v, %v", l, err)
	}
	if _, err := leaderGauge(strings.NewReader("go_goroutines 12\n")); err == nil {
		t.Error("no gauge: no error")
	}
}

func TestJwtID(t *testing.T) {
	enc := base64.RawURLEncoding.EncodeToString
	tok := enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(`{"aud":["https://kubernetes.default.svc.cluster.local"],"jti":"0b0e8e5a","sub":"system:serviceaccount:kube-system:cri-guard-controller"}`)) + ".c2ln"
	if got, err := jwtID(tok); err != nil || got != "0b0e8e5a" {
		t.Errorf("jwtID = %q, %v", got, err)
	}
	if _, err := jwtID(enc([]byte(`{}`)) + "." + enc([]byte(`{"sub":"x"}`)) + ".c2ln"); err == nil {
		t.Error("no jti: no error")
	}
	if _, err := jwtID("abc"); err == nil {
		t.Error("not a JWT: no error")
	}
}

func TestTaintEpisodes(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 15, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	obs := []nodeObs{
		{ms(0), "new-0", false, false}, {ms(0), "new-1", false, false}, {ms(0), "new-2", true, true}, {ms(0), "new-3", false, false},
		// new-0: tainted 40 ms after its condition, untainted 25 ms after
		{ms(1000), "new-0", true, false}, {ms(1040), "new-0", true, true},
		{ms(9000), "new-0", false, true}, {ms(9025), "new-0", false, false},
		// new-1: 300 ms
		{ms(1100), "new-1", true, false}, {ms(1400), "new-1", true, true},
		// new-2 was tainted at the first list: that is no episode; then
		// its condition and taint go in one event (a relist)
		{ms(5000), "new-2", false, false},
		// new-3: the condition flips back before any taint, then again and
		// the taint follows the second
		{ms(2000), "new-3", true, false}, {ms(2500), "new-3", false, false}, {ms(3000), "new-3", true, false}, {ms(3100), "new-3", true, true},
	}
	eps := taintEpisodes(obs)
	type ep struct {
		node, action string
		sec          float64
		together     bool
		seen         bool
	}
	var got []ep
	for _, e := range eps {
		got = append(got, ep{e.Node, e.Action, e.Seconds, e.Together, !e.TaintAt.IsZero()})
	}
	slices.SortFunc(got, func(a, b ep) int {
		return strings.Compare(a.node+a.action+fmt.Sprint(a.sec), b.node+b.action+fmt.Sprint(b.sec))
	})
	want := []ep{
		{"new-0", "applied", 0.04, false, true},
		{"new-0", "removed", 0.025, false, true},
		{"new-1", "applied", 0.3, false, true},
		{"new-2", "removed", 0, true, true},
		{"new-3", "applied", 0, false, false},
		{"new-3", "applied", 0.1, false, true},
		{"new-3", "removed", 0, false, false},
	}
	if len(got) != len(want) {
		t.Fatalf("episodes %+v, want %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.node != w.node || g.action != w.action || g.together != w.together || g.seen != w.seen || !near(g.sec, w.sec) {
			t.Errorf("episode %d: %+v, want %+v", i, g, w)
		}
	}
	a := latencyOf(eps, "applied")
	if a.Episodes != 4 || a.N != 3 || a.NotSeen != 1 || !near(a.Median, 0.1) || !near(a.Max, 0.3) {
		t.Errorf("applied: %+v, want 4 episodes, 3 measured, median 0.1, max 0.3, 1 not seen", a)
	}
	r := latencyOf(eps, "removed")
	if r.Episodes != 3 || r.N != 1 || r.Together != 1 || r.NotSeen != 1 || !near(r.Median, 0.025) || !near(r.Max, 0.025) {
		t.Errorf("removed: %+v", r)
	}
	// an even count takes the mean of the middle two
	if m := latencyOf([]taintEpisode{
		{Action: "applied", TaintAt: t0, Seconds: 1}, {Action: "applied", TaintAt: t0, Seconds: 4},
		{Action: "applied", TaintAt: t0, Seconds: 2}, {Action: "applied", TaintAt: t0, Seconds: 3},
	}, "applied"); !near(m.Median, 2.5) || m.Max != 4 {
		t.Errorf("median of 1..4: %+v", m)
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestAggregateRSS(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 15, 0, 0, 0, time.UTC)
	phases := []fleetPhase{{Name: "quiet", Start: t0, End: t0.Add(time.Minute)}, {Name: "after", Start: t0.Add(time.Minute), End: t0.Add(2 * time.Minute)}}
	s := []rssSample{
		{t0, "ctl-0", 20 << 20, true}, {t0.Add(time.Second), "ctl-0", 22 << 20, true}, {t0.Add(2 * time.Second), "ctl-0", 30 << 20, true},
		{t0, "ctl-1", 18 << 20, false},
		{t0, "new", 25 << 20, false}, {t0, "new", 27 << 20, false},
		// ctl-0 follows in the next phase
		{t0.Add(70 * time.Second), "ctl-0", 31 << 20, false},
		{t0.Add(3 * time.Minute), "ctl-0", 99 << 20, false}, // outside every phase
	}
	got := aggregateRSS(s, phases, []string{"old", "new"})
	want := map[string]map[string]rssStat{
		"quiet": {roleLeader: {3, 22 << 20, 30 << 20}, roleFollower: {1, 18 << 20, 18 << 20}, "new": {2, 26 << 20, 27 << 20}},
		"after": {roleFollower: {1, 31 << 20, 31 << 20}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("aggregateRSS = %v, want %v", got, want)
	}
}

// The replicas run with the Deployment's flags, but the kubeconfig and
// their metrics address.
func TestCtlArgsFromDeployment(t *testing.T) {
	ms, err := readCtlManifests("../../../../contrib/controller")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, m := range ms {
		kinds = append(kinds, m.obj.GetKind())
	}
	for _, k := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment"} {
		if !slices.Contains(kinds, k) {
			t.Errorf("no %s among the manifests' objects %v", k, kinds)
		}
	}
	args, err := ctlArgs(ms, "/run/x/kubeconfig")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"--effect=NoSchedule", "--stale-after=15m", "--leader-elect-namespace=kube-system", "--leader-elect-name=cri-guard-controller",
		"--log-format=json", "--metrics-address=127.0.0.1:0", "--kubeconfig=/run/x/kubeconfig"} {
		if !slices.Contains(args, a) {
			t.Errorf("args %q: no %s", args, a)
		}
	}
	n := 0
	for _, a := range args {
		if strings.HasPrefix(a, "--metrics-address") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("args %q: %d --metrics-address, want the bench's alone", args, n)
	}
	if _, err := ctlArgs(ms[:1], "k"); err == nil {
		t.Error("manifests without a Deployment: no error")
	}
}

func TestSplitYAMLDocs(t *testing.T) {
	docs := splitYAMLDocs([]byte("a: 1\n---\nb: 2\n--- \n\n---\nc: 3\n"))
	var got []string
	for _, d := range docs {
		got = append(got, strings.TrimSpace(string(d)))
	}
	if want := []string{"a: 1", "b: 2", "", "c: 3"}; !reflect.DeepEqual(got, want) {
		t.Errorf("docs %q, want %q", got, want)
	}
}

func TestCtlMetricsAddress(t *testing.T) {
	log := `{"level":"info","msg":"leader election: campaigning","time":"2026-12-04T15:00:00Z"}
{"component":"taint-controller","effect":"NoSchedule","identity":"h_1a2b","level":"info","metrics_address":"127.0.0.1:40123","msg":"cri-guard-controller started","stale_after":900000000000,"time":"2026-12-04T15:00:00Z"}
`
	if got, err := ctlMetricsAddress(strings.NewReader(log)); err != nil || got != "127.0.0.1:40123" {
		t.Errorf("ctlMetricsAddress = %q, %v", got, err)
	}
	if _, err := ctlMetricsAddress(strings.NewReader(strings.SplitN(log, "\n", 2)[0])); err == nil {
		t.Error("no start line: no error")
	}
}

// The controller's table gives each role's requests in the phase and per
// minute of it, beside a node's, and the RSS of both.
func TestPrintCtlPhase(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 15, 0, 0, 0, time.UTC)
	p := fleetPhase{Name: "quiet", Start: t0, End: t0.Add(4 * time.Minute), Bytes: map[string]byteCount{"ctl-0": {In: 1000, Out: 5000}}}
	res := fleetResult{Phases: []fleetPhase{p}}
	res.Aggregate = fleetAggregate{Phases: map[string]map[string]*fleetAgg{"quiet": {"old": {}, "new": {}}}}
	res.Aggregate.Phases["quiet"]["new"].Kinds[kindNodeWrite] = 16 // 2 nodes, 4 min: 2 a minute each
	res.Controller = &ctlResult{
		Replicas: []ctlReplica{{Name: "ctl-0"}, {Name: "ctl-1"}},
		Phases: map[string]map[string]*ctlAgg{"quiet": {
			roleLeader:   {Requests: map[string]int{"update leases": 120, "patch nodes": 4}, Total: 124, TaintPatches: 4, TaintPatchNodes: 3, Replicas: []string{"ctl-0"}},
			roleFollower: {Requests: map[string]int{"get leases": 118}, Total: 118, Replicas: []string{"ctl-1"}},
		}},
	}
	res.RSS = map[string]map[string]rssStat{"quiet": {roleLeader: {240, 30 << 20, 31 << 20}, "new": {96, 25 << 20, 26 << 20}}}
	var b strings.Builder
	o := fleetOptions{Nodes: 2}
	printCtlPhase(&b, o, res, p)
	printRSS(&b, res.RSS["quiet"])
	out := b.String()
	for _, want := range []string{
		"update leases  120  30.0  0  0",
		"get leases    0     0  118  29.5",
		"all  124  31.0  118  29.5",
		"a node's cri-guard, all requests per minute: old 0, new 2.000",
		"taint patches (patch nodes, 2xx): leader 4 on 3 Nodes, follower 0",
		"ctl-0 in 1000 out 5000",
		"controller leader 30.0 / 31.0 (240 samples)",
		"a node's cri-guard, new 25.0 / 26.0 (96 samples)",
	} {
		if !strings.Contains(squeeze(out), squeeze(want)) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	// update leases comes first, as the rows the controller makes
	if strings.Index(out, "update leases") > strings.Index(out, "get leases") {
		t.Errorf("rows out of order:\n%s", out)
	}
}

// squeeze collapses runs of spaces, for comparing tabwriter output.
func squeeze(s string) string { return strings.Join(strings.Fields(s), " ") }
