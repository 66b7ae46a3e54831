package race

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSummarizeRace(t *testing.T) {
	ms := time.Millisecond
	runs := []raceRun{
		{mode: "kubelet", rate: 25, outcome: outcomeWon, crossed: true, toDecision: 3000 * ms, toStopped: 3100 * ms, peakBytes: 900 << 20},
		{mode: "kubelet", rate: 25, outcome: outcomeOOM, killed: []string{roleRunaway}, crossed: true, toDecision: -1, toStopped: -1, peakBytes: 1024 << 20},
		{mode: "default", rate: 25, outcome: outcomeWon, crossed: true, toDecision: 20 * ms, toStopped: 90 * ms, peakBytes: 830 << 20, grewBytes: 4 << 20},
		{mode: "default", rate: 25, outcome: outcomeWon, crossed: true, toDecision: 10 * ms, toStopped: 80 * ms, peakBytes: 828 << 20, grewBytes: 2 << 20},
		{mode: "default", rate: 50, outcome: outcomeWrongPod, killed: []string{roleBestEffort}, toDecision: -1, toStopped: -1},
		{mode: "kubelet", rate: 50, outcome: outcomeTimeout, toDecision: -1, toStopped: -1},
	}
	modes := []string{"default", "kubelet"}
	rows := summarize(runs, modes)
	if len(rows) != 4 {
		t.Fatalf("rows = %d, want 4", len(rows))
	}
	for i, want := range []struct {
		mode      string
		rate      float64
		won, lost int
	}{{"default", 25, 2, 0}, {"kubelet", 25, 1, 1}, {"default", 50, 0, 1}, {"kubelet", 50, 0, 1}} {
		r := rows[i]
		if r.mode != want.mode || r.rate != want.rate || r.won != want.won || r.lost != want.lost {
			t.Errorf("row %d = %s %g won %d lost %d, want %+v", i, r.mode, r.rate, r.won, r.lost, want)
		}
	}
	if rows[1].killed[roleRunaway] != 1 || rows[2].wrong != 1 || rows[3].timeouts != 1 {
		t.Errorf("killed/wrong/timeouts not counted: %+v", rows)
	}
	if got := fmtDurations(rows[0].decision); got != "20ms/20ms" {
		t.Errorf("decision = %q, want median/max 20ms/20ms", got)
	}
	if got := winningRate(rows, "default"); got != 25 {
		t.Errorf("winning rate of default = %g, want 25", got)
	}
	if got := winningRate(rows, "kubelet"); got != 0 {
		t.Errorf("winning rate of kubelet = %g, want 0", got)
	}
	var b bytes.Buffer
	printRace(&b, runs, modes)
	out := b.String()
	for _, want := range []string{"runaway×1", "1 wrong pod", "1 timeout", "wins every run up to", "25 MB/s", "none"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestDecisionTime(t *testing.T) {
	log := `time="2026-12-01T19:00:00.100Z" level=warning msg="evicting pod" component=evictor pod=race-runaway-12 qos=burstable
time="2026-12-01T19:00:00.200Z" level=warning msg="evicting pod" component=evictor pod=race-runaway-1
`
	tm, ok := decisionTime(log, "race-runaway-1")
	if !ok || tm.Format("05.000") != "00.200" {
		t.Fatalf("decisionTime = %v %v, want the second line (not the prefix match)", tm, ok)
	}
	if _, ok := decisionTime(log, "race-runaway-2"); ok {
		t.Fatal("found a decision for a pod not in the log")
	}
}

func TestParseRaceFlags(t *testing.T) {
	var stderr bytes.Buffer
	o, err := parseRaceFlags([]string{"--memhog", "/x", "--quick"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Rates) != 3 || o.Runs != 1 || o.Domain != 1<<30 || o.Threshold != 200<<20 {
		t.Errorf("quick options = %+v", o)
	}
	if _, err := parseRaceFlags([]string{"--memhog", "/x", "--modes", "nope"}, &stderr); err == nil {
		t.Error("unknown mode accepted")
	}
}

// TestRaceVariants: --slow-state-dir races each mode twice, side by side,
// the second with its state dir on the slow disk.
func TestRaceVariants(t *testing.T) {
	var stderr bytes.Buffer
	o, err := parseRaceFlags([]string{"--memhog", "/x", "--modes", "default,kubelet", "--slow-state-dir", "/mnt/slow"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range raceVariants(o) {
		got = append(got, fmt.Sprintf("%s:%s:%v", v.label, v.mode, v.slow))
	}
	want := []string{"default:default:false", "default-slowdisk:default:true", "kubelet:kubelet:false", "kubelet-slowdisk:kubelet:true"}
	if !slices.Equal(got, want) {
		t.Fatalf("variants %v, want %v", got, want)
	}
	o.SlowStateDir = ""
	if n := len(raceVariants(o)); n != 2 {
		t.Fatalf("variants without --slow-state-dir: %d, want 2", n)
	}
	if c := Config("default", o.Threshold, "/mnt/slow/race-1-default-slowdisk", &Domain{Group: "/g"}); !strings.Contains(c, "stateDir: /mnt/slow/race-1-default-slowdisk\n") {
		t.Fatalf("config %q does not name the state dir", c)
	}
}

func TestGrowthRate(t *testing.T) {
	t0 := time.Unix(0, 0)
	var trace []sample
	for i := range 11 { // 10 MB every 100 ms: 100 MB/s
		trace = append(trace, sample{t0.Add(time.Duration(i) * 100 * time.Millisecond), int64(i) * 10e6})
	}
	if got := growthRate(trace, 20e6, 80e6); got < 99.9 || got > 100.1 {
		t.Errorf("growthRate = %v, want 100", got)
	}
	if got := growthRate(trace, 200e6, 300e6); got != 0 {
		t.Errorf("growthRate of a trace below the window = %v, want 0", got)
	}
	if got := growthRate(trace, 50e6, 500e6); got < 99.9 || got > 100.1 {
		t.Errorf("growthRate to the last sample = %v, want 100", got)
	}
}

func TestParseKmsgOOM(t *testing.T) {
	rec := "6,1848,9351731263,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=2a85,mems_allowed=0," +
		"oom_memcg=/cri-guard-rt-pods/race-6193,task_memcg=/cri-guard-rt-pods/race-6193/kubepods/burstable/podrace-6193-default-23/2a85," +
		"task=memhog,pid=9691,uid=0\n"
	k, ok := parseKmsgOOM(rec)
	if !ok {
		t.Fatal("oom-kill record not parsed")
	}
	want := oomKill{at: 9351731263 * time.Microsecond, memcg: "/cri-guard-rt-pods/race-6193",
		taskMemcg: "/cri-guard-rt-pods/race-6193/kubepods/burstable/podrace-6193-default-23/2a85", task: "memhog", pid: 9691}
	if k != want {
		t.Errorf("parseKmsgOOM = %+v, want %+v", k, want)
	}
	for _, other := range []string{
		"6,1849,9351731361,-;Memory cgroup out of memory: Killed process 9691 (memhog) total-vm:2013716kB\n",
		"no header at all",
		"4,10,1,-;oom-kill:constraint=CONSTRAINT_NONE\n",
	} {
		if _, ok := parseKmsgOOM(other); ok {
			t.Errorf("parseKmsgOOM(%q) took it as a kill", other)
		}
	}
}

// TestOOMWatchCloses: close ends the follower's blocked read (it once
// hung, the descriptor in blocking mode, and the bench with it).
func TestOOMWatchCloses(t *testing.T) {
	w, err := watchOOM()
	if err != nil {
		t.Skipf("no /dev/kmsg here: %v", err)
	}
	time.Sleep(50 * time.Millisecond) // the follower is in its read
	done := make(chan struct{})
	go func() { w.close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("close did not end the kernel log follower")
	}
}

// TestOOMWatchIn: kills are taken from the n-th on, in the group only, and a
// gap in the kernel log since the run began makes the run unknowable.
func TestOOMWatchIn(t *testing.T) {
	w := &oomWatch{kills: []oomKill{
		{taskMemcg: "/d/kubepods/pod1/c", task: "old"},
		{taskMemcg: "/other/pod2/c", task: "elsewhere"},
		{taskMemcg: "/d/kubepods/pod3/c", task: "memhog"},
		{taskMemcg: "/dx/pod4/c", task: "prefix-only"},
	}}
	ks, err := w.in(1, 0, "/d")
	if err != nil || len(ks) != 1 || ks[0].task != "memhog" {
		t.Fatalf("in(1, 0, /d) = %+v, %v; want the memhog kill alone", ks, err)
	}
	w.lost = 1
	if _, err := w.in(1, 0, "/d"); err == nil {
		t.Fatal("a gap in the kernel log during the run was not reported")
	}
	if _, err := w.in(1, 1, "/d"); err != nil {
		t.Fatalf("a gap before the run failed it: %v", err)
	}
}

// TestRaceScenarios: --scenarios races each mode against one runaway, four
// at once and one that ignores SIGTERM, each a row of its own.
func TestRaceScenarios(t *testing.T) {
	var stderr bytes.Buffer
	o, err := parseRaceFlags([]string{"--memhog", "/x", "--modes", "default,memcg", "--scenarios", "one,four,sigterm"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range raceVariants(o) {
		got = append(got, fmt.Sprintf("%s:%s:%d:%v", v.label, v.mode, v.runaways, v.ignoreTerm))
	}
	want := []string{"default:default:1:false", "default-x4:default:4:false", "default-sigterm:default:1:true",
		"memcg:memcg:1:false", "memcg-x4:memcg:4:false", "memcg-sigterm:memcg:1:true"}
	if !slices.Equal(got, want) {
		t.Fatalf("variants %v, want %v", got, want)
	}
	if _, err := parseRaceFlags([]string{"--memhog", "/x", "--scenarios", "two"}, &stderr); err == nil {
		t.Error("an unknown scenario was taken")
	}
}
