package checkpoint

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cri-guard/cri-guard/internal/pod"
)

// TestPutFitsHugeConfigs: a pod with megabytes of annotations (legal for
// containerd) gets a record within maxRecordSize that is read back (not
// quarantined), its small annotations kept.
func TestPutFitsHugeConfigs(t *testing.T) {
	s, err := New(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	big := strings.Repeat("x", 1<<20)
	p := pod.Pod{UID: "huge", Name: "huge", Namespace: "ns", Annotations: map[string]string{
		"a": big, "b": big, pod.AnnotationConfigSource: "file"}, Static: true, Critical: true}
	if err := s.Put(Record{Pod: p, State: pod.StateReady, SandboxID: "sb"}); err != nil {
		t.Fatal(err)
	}
	recs, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 {
		t.Fatalf("records = %d, want the huge pod's", len(recs))
	}
	got := recs[0].Pod
	if got.Annotations[pod.AnnotationConfigSource] != "file" || len(got.Annotations) != 1 || !got.Critical || !got.Static {
		t.Fatalf("record read back: annotations %d (config.source %q), critical %v static %v", len(got.Annotations), got.Annotations[pod.AnnotationConfigSource], got.Critical, got.Static)
	}
}

// TestPutFitsManySmallEntries: labels and annotations each small but over
// maxRecordSize together: the largest are left out, the ones the critical
// rules classify by are kept.
func TestPutFitsManySmallEntries(t *testing.T) {
	s, err := New(t.TempDir(), nil, WithRules(pod.CriticalRules{PriorityAnnotation: pod.PolicyPriorityAnnotation}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ann := map[string]string{pod.AnnotationConfigSource: "file", pod.PolicyPriorityAnnotation: "2000000000"}
	labels := map[string]string{}
	for i := range 600 {
		ann[fmt.Sprintf("a%04d", i)] = strings.Repeat("y", 2000+i)
		labels[fmt.Sprintf("l%04d", i)] = strings.Repeat("z", 1000)
	}
	p := pod.Pod{UID: "many", Name: "many", Namespace: "ns", Labels: labels, Annotations: ann}
	if err := s.Put(Record{Pod: p, State: pod.StateReady, SandboxID: "sb"}); err != nil {
		t.Fatal(err)
	}
	recs, err := s.List()
	if err != nil || len(recs) != 1 {
		t.Fatalf("records = %d (%v), want the pod's", len(recs), err)
	}
	got := recs[0].Pod
	if got.Annotations[pod.AnnotationConfigSource] != "file" || got.Annotations[pod.PolicyPriorityAnnotation] != "2000000000" {
		t.Fatalf("classifying annotations lost: %q, %q", got.Annotations[pod.AnnotationConfigSource], got.Annotations[pod.PolicyPriorityAnnotation])
	}
	if _, ok := got.Annotations["a0599"]; ok {
		t.Fatal("the largest annotation was kept")
	}
	if len(got.Annotations)+len(got.Labels) < 300 {
		t.Fatalf("only %d labels and annotations kept: more were left out than needed", len(got.Annotations)+len(got.Labels))
	}
}

// TestPutKeepsConfiguredPriorityAnnotation: a record trimmed to fit keeps
// the priority annotation the critical rules are configured with
// (critical.priorityAnnotation), not only the default key: a restore that
// has only the record classifies the pod as it was.
func TestPutKeepsConfiguredPriorityAnnotation(t *testing.T) {
	rules := pod.CriticalRules{PriorityAnnotation: "x.io/prio"}
	s, err := New(t.TempDir(), nil, WithRules(rules))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// many labels, each smaller than the priority annotation: trimming
	// leaves out the largest entries first, the priority key among them
	labels := map[string]string{}
	for i := range 90_000 {
		labels[fmt.Sprintf("l%05d", i)] = "v"
	}
	p := pod.Pod{UID: "prio", Name: "prio", Namespace: "ns", Labels: labels, Annotations: map[string]string{
		"x.io/prio": "2000000000", pod.AnnotationConfigSource: "api"},
		Priority: 2000000000, HasPriority: true, Critical: true}
	if err := s.Put(Record{Pod: p, State: pod.StateReady, SandboxID: "sb"}); err != nil {
		t.Fatal(err)
	}
	recs, err := s.List()
	if err != nil || len(recs) != 1 {
		t.Fatalf("records = %d (%v), want the pod's", len(recs), err)
	}
	if n := len(recs[0].Pod.Labels); n == len(labels) {
		t.Fatal("the record was not trimmed")
	}
	got := recs[0].Pod.Annotations
	for _, k := range rules.Annotations() {
		if got[k] != p.Annotations[k] {
			t.Errorf("annotation %q read back %q, want %q", k, got[k], p.Annotations[k])
		}
	}
}
