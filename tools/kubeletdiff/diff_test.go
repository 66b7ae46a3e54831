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
	r, err := run(testSeed, testCount)
	if err != nil {
		t.Fatal(err)
	}
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
	k, err := newKubeletSide(kc, start)
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
