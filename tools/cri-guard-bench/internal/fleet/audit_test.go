package fleet

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// The fixtures are audit events kube-apiserver 1.36 wrote in a fleet run
// (Metadata level): testdata/fleet-audit.jsonl the start of a node of each
// fleet (the requestReceivedTimestamps of the new node and of the API
// server's own list moved into the same minute as the old node's),
// testdata/fleet-audit-restart.jsonl their relists after the API server was
// restarted, and lines made from real ones for what that run did not do (a
// Node GET with resourceVersion=0 and with an empty one, a pod GET, a
// refused watch: auditIDs 7d0e1f52-...).

func readFixture(t *testing.T, d *requestDedup, name string) []fleetRequest {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := readAudit(bytes.NewReader(b), d)
	if err != nil {
		t.Fatal(err)
	}
	return reqs
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestClassify(t *testing.T) {
	b, err := os.ReadFile("testdata/fleet-audit.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	b2, err := os.ReadFile("testdata/fleet-audit-restart.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]*auditEvent{}
	for _, l := range bytes.Split(append(b, b2...), []byte("\n")) {
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		var e auditEvent
		if err := json.Unmarshal(l, &e); err != nil {
			t.Fatal(err)
		}
		byID[e.AuditID] = &e
	}
	tests := []struct {
		name, auditID string
		want          reqKind
	}{
		{"a Node GET without resourceVersion reads etcd", "e9bac15c-3998-4dc0-be98-83ff15277a7c", kindNodeGetEtcd},
		{"a Node GET with resourceVersion=0 reads the watch cache", "7d0e1f52-0c55-4d3b-9d0a-1b1e6cbf0a10", kindNodeGetCache},
		{"a Node GET with an empty resourceVersion reads etcd", "7d0e1f52-0c55-4d3b-9d0a-1b1e6cbf0a11", kindNodeGetEtcd},
		{"a watch streaming the initial list is a list", "ddb58536-9e17-46f6-8649-9d47de6bd240", kindList},
		{"the Node's watch-list is a list", "a6b9b68e-2e2a-47fc-9f93-08cf00cd8aa3", kindList},
		{"a watch from a resourceVersion is a watch", "a6b4f992-e2d6-498f-8e9b-45581fe39033", kindWatch},
		{"a patch of nodes/status is a Node write", "26719968-3674-49be-9ba9-dbe3871303c8", kindNodeWrite},
		{"a patch of pods/status", "34c9f9dc-4b14-4037-aac5-2b62cb04cf28", kindPodStatus},
		{"an event create", "e65efbbb-a5a6-4235-9f84-d56724567664", kindEvent},
		{"a list", "f258cc72-8fd0-4481-b203-912b1510b21e", kindList},
		{"a pod GET is other", "7d0e1f52-0c55-4d3b-9d0a-1b1e6cbf0a12", kindOther},
		{"a patch of the pod itself is other", "7d0e1f52-0c55-4d3b-9d0a-1b1e6cbf0a15", kindOther},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := byID[tt.auditID]
			if e == nil {
				t.Fatalf("no event %s in the fixtures", tt.auditID)
			}
			if got := classify(e); got != tt.want {
				t.Fatalf("classify(%s %s) = %v, want %v", e.Verb, e.RequestURI, got, tt.want)
			}
		})
	}
}

func TestReadAuditCountsEachRequestOnce(t *testing.T) {
	reqs := readFixture(t, newRequestDedup(), "fleet-audit.jsonl")
	// 12 lines: two watches each logged at ResponseStarted and ResponseComplete
	if len(reqs) != 10 {
		t.Fatalf("%d requests, want 10: %+v", len(reqs), reqs)
	}
	watches := 0
	for _, r := range reqs {
		if r.verb == "watch" {
			watches++
			if want := "2026-12-03T17:20:04.485131Z"; r.resource == "pods" && r.user == "system:node:old-0" && r.kind == kindList &&
				!r.at.Equal(mustTime(t, want)) {
				t.Errorf("watch-list at %v, want its requestReceivedTimestamp %s", r.at, want)
			}
		}
	}
	if watches != 4 {
		t.Fatalf("%d watches, want 4 (2 of old-0, 2 of new-0)", watches)
	}
	if _, err := readAudit(strings.NewReader("{\"stage\":\n"), newRequestDedup()); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("a broken line: %v, want an error naming line 1", err)
	}
}

func TestReadAuditRefusedWatch(t *testing.T) {
	// a watch refused before it started has a ResponseComplete stage only
	reqs := readFixture(t, newRequestDedup(), "fleet-audit-restart.jsonl")
	found := false
	for _, r := range reqs {
		if r.verb == "watch" && r.code == 403 {
			found = true
		}
	}
	if !found {
		t.Fatal("the refused watch was not counted")
	}
}

func TestMarkRelists(t *testing.T) {
	d := newRequestDedup()
	reqs := append(readFixture(t, d, "fleet-audit.jsonl"), readFixture(t, d, "fleet-audit-restart.jsonl")...)
	markRelists(reqs)
	got := map[string][]bool{}
	for _, r := range reqs {
		if r.kind == kindList {
			k := r.user + " " + r.resource
			got[k] = append(got[k], r.relist)
		}
	}
	want := map[string][]bool{
		"system:node:old-0 pods":    {false, true, true},
		"system:node:new-0 pods":    {false},
		"system:node:new-0 nodes":   {false, true},
		"system:apiserver services": {false},
	}
	for k, w := range want {
		if len(got[k]) != len(w) {
			t.Errorf("%s: lists %v, want %v", k, got[k], w)
			continue
		}
		for i := range w {
			if got[k][i] != w[i] {
				t.Errorf("%s: relist flags %v, want %v", k, got[k], w)
				break
			}
		}
	}
}

func TestFleetOfUser(t *testing.T) {
	tests := []struct {
		user, fleet, node string
		ok                bool
	}{
		{"system:node:old-3", "old", "old-3", true},
		{"system:node:new-10", "new", "new-10", true},
		{"system:node:older-1", "", "", false},
		{"system:node:localhost", "", "", false},
		{"cri-guard-admin", "", "", false},
		{"system:apiserver", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.user, func(t *testing.T) {
			f, n, ok := fleetOfUser(tt.user, []string{"old", "new"})
			if f != tt.fleet || n != tt.node || ok != tt.ok {
				t.Fatalf("fleetOfUser(%q) = %q, %q, %v; want %q, %q, %v", tt.user, f, n, ok, tt.fleet, tt.node, tt.ok)
			}
		})
	}
}

func TestAggregateFleet(t *testing.T) {
	d := newRequestDedup()
	reqs := append(readFixture(t, d, "fleet-audit.jsonl"), readFixture(t, d, "fleet-audit-restart.jsonl")...)
	markRelists(reqs)
	back := mustTime(t, "2026-12-03T17:31:35.621940558Z") // when the bench saw the restarted server ready
	phases := []fleetPhase{
		{Name: "start", Start: mustTime(t, "2026-12-03T17:20:00Z"), End: mustTime(t, "2026-12-03T17:20:10Z")},
		{Name: "quiet", Start: mustTime(t, "2026-12-03T17:20:10Z"), End: mustTime(t, "2026-12-03T17:21:00Z")},
		{Name: "restart", Start: mustTime(t, "2026-12-03T17:31:00Z"), End: mustTime(t, "2026-12-03T17:34:00Z"), Back: back},
	}
	agg := aggregateFleet(reqs, phases, []string{"old", "new"})

	start := agg.Phases["start"]
	if k := start["old"].Kinds; k[kindNodeGetEtcd] != 1 || k[kindNodeWrite] != 1 || k[kindList] != 1 || k[kindWatch] != 0 {
		t.Errorf("start, old: %v", k)
	}
	if k := start["new"].Kinds; k[kindList] != 2 || k[kindNodeWrite] != 1 || k[kindNodeGetEtcd] != 0 {
		t.Errorf("start, new: %v", k)
	}
	if start["old"].Relists != 0 || start["new"].Relists != 0 {
		t.Errorf("start: first lists counted as relists")
	}
	// old-0's GET, its watch-list and its status patch arrived in the same second
	if start["old"].PeakPerSec != 3 {
		t.Errorf("start, old: peak %d/s, want 3", start["old"].PeakPerSec)
	}

	quiet := agg.Phases["quiet"]
	if k := quiet["old"].Kinds; k[kindWatch] != 1 || k[kindEvent] != 1 || k[kindPodStatus] != 1 || k[kindList] != 0 {
		t.Errorf("quiet, old: %v", k)
	}
	// the API server's own list counts for the server, not for a fleet
	if k := quiet["all"].Kinds; k[kindList] != 1 || k[kindWatch] != 1 || k[kindEvent] != 1 {
		t.Errorf("quiet, all: %v", k)
	}
	if quiet["new"].NodesActive != 0 || quiet["old"].NodesActive != 1 {
		t.Errorf("quiet: nodes active old %d, new %d", quiet["old"].NodesActive, quiet["new"].NodesActive)
	}

	rs := agg.Phases["restart"]
	// old-0's relist turned away (429) is a relist, not one in the spread
	if rs["new"].Relists != 1 || rs["old"].Relists != 2 {
		t.Errorf("restart: relists old %d, new %d; want 2, 1", rs["old"].Relists, rs["new"].Relists)
	}
	// the refused watch counts as a watch, not as a relist
	if k := rs["new"].Kinds; k[kindWatch] != 1 || k[kindList] != 1 {
		t.Errorf("restart, new: %v", k)
	}
	if k := rs["old"].Kinds; k[kindNodeGetCache] != 1 || k[kindNodeGetEtcd] != 1 || k[kindOther] != 2 || k[kindPodStatus] != 0 {
		t.Errorf("restart, old: %v", k)
	}
	old := rs["old"].RelistAfterBack["old-0"]
	// served 0.41 s before the bench's readyz poll saw the server ready
	if len(old) != 1 || old[0] < -0.406 || old[0] > -0.405 {
		t.Errorf("restart, old-0 relisted at %v s after the API was back, want [-0.4055]", old)
	}
	s := spreadOf(rs["new"].RelistAfterBack)
	if s.nodes != 1 || s.relists != 1 || s.first < -0.417 || s.first > -0.416 {
		t.Errorf("restart, new: %+v, want 1 node, 1 relist, first at -0.4163 s", s)
	}

	var got int
	for _, r := range agg.Raw {
		if r.Phase == "restart" && r.Fleet == "new" && r.Kind == kindList && r.Relist {
			got += r.Count
		}
	}
	if got != 1 {
		t.Errorf("raw: %d relists of new in the restart, want 1: %+v", got, agg.Raw)
	}
}

func TestSpreadOf(t *testing.T) {
	tests := []struct {
		name                string
		in                  map[string][]float64
		nodes, relists      int
		first, median, last float64
	}{
		{"none", map[string][]float64{}, 0, 0, 0, 0, 0},
		{"odd: the middle node's first", map[string][]float64{"a": {3, 1}, "b": {2}, "c": {9, 8, 7}}, 3, 6, 1, 2, 7},
		{"even: the mean of the middle two", map[string][]float64{"a": {1}, "b": {2}, "c": {4}, "d": {10}}, 4, 4, 1, 3, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := spreadOf(tt.in)
			if s.nodes != tt.nodes || s.relists != tt.relists || s.first != tt.first || s.median != tt.median || s.last != tt.last {
				t.Fatalf("spreadOf = %+v, want nodes %d relists %d first %v median %v last %v", s, tt.nodes, tt.relists, tt.first, tt.median, tt.last)
			}
		})
	}
}

func TestDiffBytes(t *testing.T) {
	// the proxies' running totals at each phase's end
	in := []fleetPhase{
		{Name: "start", Bytes: map[string]byteCount{"old": {In: 100, Out: 1000}, "new": {In: 50, Out: 500}}},
		{Name: "quiet", Bytes: map[string]byteCount{"old": {In: 130, Out: 1300}, "new": {In: 50, Out: 520}}},
	}
	out := diffBytes(in)
	if got := out[1].Bytes["old"]; got != (byteCount{In: 30, Out: 300}) {
		t.Errorf("quiet, old: %+v, want 30 in, 300 out", got)
	}
	if got := out[1].Bytes["new"]; got != (byteCount{In: 0, Out: 20}) {
		t.Errorf("quiet, new: %+v, want 0 in, 20 out", got)
	}
	if got := out[0].Bytes["old"]; got != (byteCount{In: 100, Out: 1000}) {
		t.Errorf("start, old: %+v, want the totals", got)
	}
	if in[1].Bytes["old"].In != 130 {
		t.Error("diffBytes changed its input")
	}
}
