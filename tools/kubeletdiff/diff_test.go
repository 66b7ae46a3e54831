package main

import (
	"strings"
	"testing"
)

// mustAgree lists the fields that must agree 100% (of what CRI, or CRI and
// the API for "admission (with the API)", can observe).
var mustAgree = map[string]bool{
	FieldConfig:       true,
	FieldConditions:   true,
	FieldAdmission:    true,
	FieldAdmissionAPI: true,
	FieldVictim:       true,
	FieldVictimCRI:    true,
	FieldGrace:        true,
	FieldMessage:      true, // with the containers' stats and requests (the API's, or a BestEffort pod's none)
	FieldAdmitMsg:     true, // the kubelet's sentence first, cri-guard's observation after it
}

const (
	testSeed  = 1
	testCount = 300
)

func TestDifferential(t *testing.T) {
	r, err := run(testSeed, testCount, false)
	if err != nil {
		t.Fatal(err)
	}
	checkReport(t, r)
	pooled := 0
	for i := range testCount {
		if len(newScenario(testSeed+int64(i)).HugePages) > 0 {
			pooled++
		}
	}
	if pooled == 0 {
		t.Error("no random scenario has huge pages")
	}
	t.Logf("%d of %d random scenarios have huge pages", pooled, testCount)
}

// TestTargeted runs the hand-made scenarios (huge page pools at the edges
// the kubelet from 1.37 sees), checks that the kubelet does what each says,
// and that cri-guard agrees with it.
func TestTargeted(t *testing.T) {
	if !kubeletSubtractsHugePages() {
		t.Fatal("the kubelet built here does not have HugepageAwareEviction on")
	}
	quietKlog()
	r := newReport()
	dir := t.TempDir()
	for _, c := range targetedCases() {
		if err := runScenario(c.Scenario, dir, r); err != nil {
			t.Fatalf("%s: %v", c.Scenario.Name, err)
		}
		for i, want := range c.Want {
			got := r.Kills[c.Scenario.Seed][i]
			if !strings.HasPrefix(got, want) || (want == "") != (got == "") {
				t.Errorf("%s step %d: kubelet evicts with %q, want %q", c.Scenario.Name, i, got, want)
			}
		}
	}
	checkReport(t, r)
}

func checkReport(t *testing.T, r *report) {
	t.Helper()
	var b strings.Builder
	r.print(&b, 2)
	t.Log("\n" + b.String())
	for _, f := range fieldOrder {
		tl := r.Tallies[f]
		if tl.Compared == 0 {
			t.Errorf("%s: nothing compared", f)
		}
		if mustAgree[f] && tl.Agreed != tl.Compared {
			t.Errorf("%s: %d of %d agree; must be all", f, tl.Agreed, tl.Compared)
		}
	}
}

// TestKubeletDriver checks the go:linkname'd synchronize against a known
// case: a hard memory.available threshold met evicts the best-ranked pod
// with grace 1s and the kubelet's message, and the node reports pressure.
func TestKubeletDriver(t *testing.T) {
	quietKlog()
	kc, err := loadKubeletConfig(t.TempDir(), []byte("evictionHard:\n  memory.available: \"1Gi\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	node, err := kubeletNode(4<<30, t.TempDir()) // no huge pages
	if err != nil {
		t.Fatal(err)
	}
	k, err := newKubeletSide(kc, start, node)
	if err != nil {
		t.Fatal(err)
	}
	s := &scenario{Capacity: 4 << 30, AllocCap: 4 << 30, Pods: []*podSpec{
		{Name: "small", UID: "u1", QOS: "BestEffort", Containers: []containerSpec{{Name: "c0"}}},
		{Name: "big", UID: "u2", QOS: "BestEffort", Containers: []containerSpec{{Name: "c0"}}},
	}}
	st := step{NodeAvail: 1<<30 - 1, AllocAvail: 2 << 30, Usage: map[string][]int64{"u1": {100 * mi}, "u2": {900 * mi}}}
	k.clock.Step(1)
	k.summary, k.pods = s.summary(st, s.Pods, k.clock.Now())
	kk, err := k.synchronize()
	if err != nil {
		t.Fatal(err)
	}
	if kk == nil || kk.Pod.Name != "big" || kk.Grace != 1 {
		t.Fatalf("kubelet kill = %+v, want pod big with grace 1", kk)
	}
	const want = "The node was low on resource: memory. Threshold quantity: 1Gi, available: 1073741823. Container c0 was using 900Mi, request is 0, has larger consumption of memory. "
	if kk.Message != want {
		t.Errorf("message %q, want %q", kk.Message, want)
	}
	if !k.mgr.IsUnderMemoryPressure() {
		t.Error("no MemoryPressure")
	}
	if a := k.actingThresholds(); len(a) != 1 { // memory.available; its allocatable copy is not met
		t.Errorf("acting thresholds %+v, want 1", a)
	}
}
