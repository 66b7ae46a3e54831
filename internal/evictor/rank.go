package evictor

import (
	"cmp"
	"slices"

	"github.com/cri-guard/cri-guard/internal/pod"
)

// Candidate is an evictable pod with the keys it was ranked by.
type Candidate struct {
	Pod *pod.Pod `json:"-"`
	// HasStats is false when the pod's cgroup could not be read.
	HasStats bool `json:"hasStats"`
	// WorkingSet is the pod's memory working set in bytes.
	WorkingSet int64 `json:"workingSet"`
	// Request is the pod's known memory request in bytes (0 if unknown).
	Request int64 `json:"request"`
}

// exceeds reports whether usage is above the request (BestEffort always is).
func (c *Candidate) exceeds() bool { return c.WorkingSet > c.Request }

// rank orders the evictable active pods as the kubelet's rankMemoryPressure
// does: pods without stats first, then pods whose usage exceeds their
// request, then lower priority, then larger usage above request.
func (m *Manager) rank(active []*pod.Pod) []Candidate {
	cands := make([]Candidate, 0, len(active))
	for _, p := range active {
		if !p.Evictable || p.State != pod.StateReady {
			continue
		}
		c := Candidate{Pod: p}
		if st, err := m.sampler.Pod(p.CgroupParent); err == nil && st.HasMemory {
			c.HasStats, c.WorkingSet, c.Request = true, st.WorkingSetBytes, st.RequestBytes
		}
		if p.HasMemoryRequest { // the API's request, as the kubelet reads it
			c.Request = p.MemoryRequestBytes
		}
		cands = append(cands, c)
	}
	rank(cands)
	return cands
}

// rank sorts candidates in eviction order, first to evict first.
func rank(cands []Candidate) {
	slices.SortStableFunc(cands, compareCandidates)
}

func compareCandidates(a, b Candidate) int {
	if a.HasStats != b.HasStats {
		return trueFirst(!a.HasStats, !b.HasStats)
	}
	if a.HasStats {
		if c := trueFirst(a.exceeds(), b.exceeds()); c != 0 {
			return c
		}
	}
	if c := cmp.Compare(a.Pod.Priority, b.Pod.Priority); c != 0 {
		return c
	}
	if a.HasStats {
		// larger usage above request first
		return cmp.Compare(b.WorkingSet-b.Request, a.WorkingSet-a.Request)
	}
	return 0
}

// trueFirst orders true before false.
func trueFirst(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	default:
		return 1
	}
}
