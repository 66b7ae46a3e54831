package main

import (
	"time"

	"github.com/cri-guard/cri-guard/internal/pod"
)

// targetedCase is a hand-made scenario with what the kubelet must do at
// each step: its eviction message, "" for none. The expectations are
// checked against the kubelet (TestTargeted) so that a case cannot pass
// by both sides doing something else than it says.
type targetedCase struct {
	Scenario *scenario
	Want     []string
}

const gib = int64(1) << 30

// Seeds of targeted cases are negative: random scenarios have seeds from
// -seed, 1 by default.
func targetedCases() []targetedCase {
	hard := func(m map[string]string) cfgSpec { return cfgSpec{Hard: m} }
	// int64(float64(capacity) × float64(float32(percent/100))), as
	// evictionapi.GetThresholdQuantity
	pct := func(capa int64, v string) int64 { b, _ := valueBytes(v, capa); return b }
	cases := []struct {
		name   string
		cfg    cfgSpec
		capa   int64
		pools  []hugePool
		avails []int64 // NodeAvail per step, before the pool is taken off
		want   []string
	}{
		{
			// 2.5Gi available less a 1Gi pool leaves 1.5Gi: above 1Gi
			name: "1Gi pool, 2.5Gi available, hard 1Gi: no eviction", cfg: hard(map[string]string{"memory.available": "1Gi"}),
			capa: 4 * gib, pools: []hugePool{{2048, 512}}, avails: []int64{2*gib + 512*mi},
			want: []string{""},
		},
		{
			name: "1Gi pool, 1.5Gi available, hard 1Gi: 512Mi left", cfg: hard(map[string]string{"memory.available": "1Gi"}),
			capa: 4 * gib, pools: []hugePool{{2048, 512}}, avails: []int64{gib + 512*mi},
			want: []string{"Threshold quantity: 1Gi, available: 512Mi. "},
		},
		{
			name: "1Gi of 1Gi pages, hard 10% of MemTotal less the pool", cfg: hard(map[string]string{"memory.available": "10%"}),
			capa: 4 * gib, pools: []hugePool{{1 << 20, 1}},
			// one byte below, at, and one byte above 10% of 3Gi, plus the pool
			avails: []int64{gib + pct(3*gib, "10%") - 1, gib + pct(3*gib, "10%"), gib + pct(3*gib, "10%") + 1},
			want:   []string{"Threshold quantity: 322122552, available: 322122551. ", "", ""},
		},
		{
			name: "a pool larger than what is available: 0 left, percentages of the working set", cfg: hard(map[string]string{"memory.available": "10%"}),
			capa: 4 * gib, pools: []hugePool{{1 << 20, 2}}, avails: []int64{gib, 2 * gib},
			want: []string{"Threshold quantity: 322122552, available: 0. ", "Threshold quantity: 214748368, available: 0. "},
		},
		{
			name: "2Mi and 1Gi pages together", cfg: hard(map[string]string{"memory.available": "500Mi"}),
			capa: 8 * gib, pools: []hugePool{{2048, 256}, {1 << 20, 1}}, avails: []int64{gib + 512*mi + 499*mi, gib + 512*mi + 500*mi},
			want: []string{"Threshold quantity: 500Mi, available: 499Mi. ", ""},
		},
		{
			// allocatableMemory.available is not adjusted: its 1Gi threshold is not met at 1.5Gi
			name: "the pods cgroup's signal ignores the pool", cfg: hard(map[string]string{"allocatableMemory.available": "1Gi"}),
			capa: 4 * gib, pools: []hugePool{{2048, 1024}}, avails: []int64{gib},
			want: []string{""},
		},
		{
			name: "soft threshold and min-reclaim with a pool",
			cfg: cfgSpec{Soft: map[string]string{"memory.available": "1Gi"}, SoftGrace: map[string]string{"memory.available": "30s"},
				MinReclaim: map[string]string{"memory.available": "5%"}, Hard: map[string]string{}},
			capa: 4 * gib, pools: []hugePool{{2048, 512}},
			// met, grace over (evicts), then above the threshold but below
			// it + 5% of 3Gi: still acting
			avails: []int64{gib + 900*mi, gib + 900*mi, 2*gib + 100*mi},
			want:   []string{"", "Threshold quantity: 1Gi, available: 900Mi. ", "Threshold quantity: 1Gi, available: 1124Mi. "},
		},
	}
	var out []targetedCase
	for i, c := range cases {
		s := &scenario{Seed: -int64(i + 1), Name: c.name, Cfg: c.cfg, Capacity: c.capa, AllocCap: c.capa, HugePages: c.pools}
		s.Pods = []*podSpec{
			{Name: "be-small", UID: "t-be-small", QOS: pod.BestEffort, Containers: []containerSpec{{Name: "c0"}}},
			{Name: "be-big", UID: "t-be-big", QOS: pod.BestEffort, Containers: []containerSpec{{Name: "c0"}}},
			{Name: "bu", UID: "t-bu", QOS: pod.Burstable, Containers: []containerSpec{{Name: "c0", Request: 256 * mi}}},
			{Name: "be-more", UID: "t-be-more", QOS: pod.BestEffort, Containers: []containerSpec{{Name: "c0"}}},
		}
		for _, a := range c.avails {
			s.Steps = append(s.Steps, step{Advance: 40 * time.Second, NodeAvail: a, AllocAvail: 1536 * mi,
				Usage: map[string][]int64{"t-be-small": {100 * mi}, "t-be-big": {700 * mi}, "t-bu": {200 * mi}, "t-be-more": {300 * mi}}})
		}
		want := make([]string, len(c.want))
		for j, w := range c.want {
			if w != "" {
				want[j] = "The node was low on resource: memory. " + w
			}
		}
		out = append(out, targetedCase{Scenario: s, Want: want})
	}
	return out
}
