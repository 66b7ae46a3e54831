package pod

import "testing"

// TestApplyAPIPriorityOnlyFromAPI: with the API a pod's priority is
// spec.priority alone. A pod's author writes its annotations (and the
// kubelet copies them into the CRI request), so an annotation claiming a
// system-critical priority must not make the pod critical, whether or not
// the operator named a priority annotation, and whatever the API says.
func TestApplyAPIPriorityOnlyFromAPI(t *testing.T) {
	i32 := func(v int32) *int32 { return &v }
	claim := map[string]string{AnnotationConfigSource: configSourceAPI, PolicyPriorityAnnotation: "2000000000"}
	tests := []struct {
		name         string
		rules        CriticalRules
		api          *int32
		wantCritical bool
		wantPriority int32
		wantHas      bool
	}{
		{"default rules, no API priority", CriticalRules{}, nil, false, 0, false},
		{"default rules, API priority 0", CriticalRules{}, i32(0), false, 0, true},
		{"annotation named, no API priority", CriticalRules{PriorityAnnotation: PolicyPriorityAnnotation}, nil, false, 0, false},
		{"annotation named, API priority 100", CriticalRules{PriorityAnnotation: PolicyPriorityAnnotation}, i32(100), false, 100, true},
		{"annotation named, API system-critical", CriticalRules{PriorityAnnotation: PolicyPriorityAnnotation}, i32(systemCriticalPriority), true, systemCriticalPriority, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &Pod{Namespace: "default", Annotations: claim}
			if err := tt.rules.classify(p); err != nil {
				t.Fatal(err)
			}
			tt.rules.ApplyAPI(p, API{Priority: tt.api})
			if p.Critical != tt.wantCritical || p.Evictable == tt.wantCritical {
				t.Errorf("critical/evictable = %v/%v, want critical %v", p.Critical, p.Evictable, tt.wantCritical)
			}
			if p.Priority != tt.wantPriority || p.HasPriority != tt.wantHas {
				t.Errorf("priority = %d (%v), want %d (%v)", p.Priority, p.HasPriority, tt.wantPriority, tt.wantHas)
			}
		})
	}
}
