package main

import (
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cri-guard/cri-guard/internal/pod"
)

const mi = int64(1 << 20)

// scenario is one random node: an eviction configuration, pods, and a
// sequence of samples. Everything derives from Seed.
type scenario struct {
	Seed     int64
	Cfg      cfgSpec
	Capacity int64 // node memory: available + working set
	AllocCap int64 // pods cgroup: available + working set
	Pods     []*podSpec
	Steps    []step
	// HugePages is the node's huge page pools (none: no pool); NodeAvail
	// in a step is before the pool is taken off, what both sides' stats
	// read (limit − working set).
	HugePages []hugePool
	// Name is a targeted scenario's; random ones have none.
	Name            string
	probeSeq        int
	thresholdsBytes []int64 // candidate edges for samples
}

// cfgSpec is the eviction part of a KubeletConfiguration; nil maps and
// pointers are absent keys.
type cfgSpec struct {
	Hard, Soft, SoftGrace, MinReclaim map[string]string
	Transition                        *string
	MaxPodGrace                       *int32
}

type containerSpec struct {
	Name    string
	Request int64 // 0: none
	Limit   int64 // 0: none
}

type podSpec struct {
	Name, UID  string
	QOS        pod.QOSClass
	Static     bool
	Priority   *int32
	TGPS       *int64
	Tolerates  bool // tolerates node.kubernetes.io/memory-pressure (invisible to CRI)
	Containers []containerSpec
}

// hugePool is one huge page size's pool: nr_hugepages pages of PageKB.
type hugePool struct {
	PageKB, Pages int64
}

// hugePoolBytes is the node's huge page pool.
func (s *scenario) hugePoolBytes() int64 {
	var n int64
	for _, p := range s.HugePages {
		n += p.PageKB << 10 * p.Pages
	}
	return n
}

// step is one eviction pass: the clock advances, then both sides sample.
type step struct {
	Advance    time.Duration
	NodeAvail  int64
	AllocAvail int64
	// Usage per pod UID, one figure per container; absent: no stats.
	Usage map[string][]int64
}

var signals = []string{"memory.available", "allocatableMemory.available"}

func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.Intn(len(xs))] }

func genValue(r *rand.Rand) string {
	if r.Intn(3) == 0 {
		return pick(r, "5%", "10%", "12.5%", "7%", "0%", "100%", "20%", "3.3%")
	}
	return pick(r, fmt.Sprintf("%dMi", 50+r.Intn(1500)), "100Mi", "1Gi", fmt.Sprintf("%d", (100+r.Int63n(900))*mi), "500M")
}

func genSignals(r *rand.Rand) map[string]string {
	m := map[string]string{}
	for _, s := range signals {
		if r.Intn(2) == 0 {
			m[s] = genValue(r)
		}
	}
	return m
}

func newScenario(seed int64) *scenario {
	r := rand.New(rand.NewSource(seed))
	s := &scenario{Seed: seed}
	// Configuration.
	if r.Intn(4) != 0 {
		s.Cfg.Hard = genSignals(r) // may be {}: replaces the defaults
	}
	if r.Intn(2) == 0 {
		s.Cfg.Soft = genSignals(r)
		s.Cfg.SoftGrace = map[string]string{}
		for _, sig := range slices.Sorted(maps.Keys(s.Cfg.Soft)) { // seed order, not map order
			s.Cfg.SoftGrace[sig] = pick(r, "0s", "10s", "30s", "1m", "2m")
		}
	}
	if r.Intn(3) == 0 {
		s.Cfg.MinReclaim = map[string]string{}
		for _, sig := range signals {
			if r.Intn(2) == 0 {
				s.Cfg.MinReclaim[sig] = pick(r, "50Mi", "200Mi", "5%", "1%")
			}
		}
	}
	if r.Intn(2) == 0 {
		s.Cfg.Transition = ptr(pick(r, "0s", "30s", "1m", "5m", "10s"))
	}
	if r.Intn(2) == 0 {
		s.Cfg.MaxPodGrace = ptr(pick[int32](r, 0, 10, 30, 60))
	}
	// Node.
	s.Capacity = pick[int64](r, 2, 4, 8, 16) << 30
	s.AllocCap = s.Capacity - r.Int63n(1<<30)
	// Pods.
	n := 1 + r.Intn(15)
	for i := 0; i < n; i++ {
		s.Pods = append(s.Pods, s.genPod(r, fmt.Sprintf("pod-%d", i)))
	}
	// Edges the samples gravitate to: each threshold's bytes (and + reclaim),
	// in key order: genAvail picks them by index, so a scenario is a function
	// of its seed alone.
	for _, m := range []map[string]string{s.Cfg.Hard, s.Cfg.Soft, s.Cfg.MinReclaim, {"d": "100Mi"}} {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			v := m[k]
			for _, capa := range []int64{s.Capacity, s.AllocCap} {
				if b, ok := valueBytes(v, capa); ok {
					s.thresholdsBytes = append(s.thresholdsBytes, b)
				}
			}
		}
	}
	// Steps.
	steps := 3 + r.Intn(8)
	for i := 0; i < steps; i++ {
		st := step{Advance: pick(r, time.Second, 5*time.Second, 10*time.Second, 20*time.Second, 30*time.Second, time.Minute, 3*time.Minute, 6*time.Minute),
			Usage: map[string][]int64{}}
		st.NodeAvail = s.genAvail(r, s.Capacity)
		st.AllocAvail = s.genAvail(r, s.AllocCap)
		for _, p := range s.Pods {
			if r.Intn(8) == 0 {
				continue // no stats this pass
			}
			u := make([]int64, len(p.Containers))
			for j, c := range p.Containers {
				switch {
				case c.Request > 0 && r.Intn(4) == 0:
					u[j] = c.Request // equal to the request: not exceeding it
				case r.Intn(6) == 0:
					u[j] = pick(r, int64(0), 100*mi, 256*mi) // ties
				default:
					u[j] = r.Int63n(1 << 30)
				}
			}
			st.Usage[p.UID] = u
		}
		s.Steps = append(s.Steps, st)
	}
	s.genHugePages(rand.New(rand.NewSource(seed ^ hugePagesStream)))
	return s
}

// hugePagesStream keys the random stream of a scenario's huge pages: it is
// separate so that everything else in a scenario is what its seed gave
// before huge pages were generated.
const hugePagesStream = 0x6875676570616765

// genHugePages gives a third of the nodes a huge page pool (2 MiB pages,
// 1 GiB pages or both, sometimes more than is available) and moves some of
// their samples to the edges the kubelet from 1.37 sees: each
// memory.available threshold (percentages of capacity less the pool) plus
// the pool, and the pool itself (0 left).
func (s *scenario) genHugePages(r *rand.Rand) {
	if r.Intn(3) != 0 {
		return
	}
	if r.Intn(4) != 0 {
		s.HugePages = append(s.HugePages, hugePool{PageKB: 2048, Pages: pick(r, int64(1), 3, 64, 512, 1024, r.Int63n(1025))})
	}
	if len(s.HugePages) == 0 || r.Intn(3) == 0 {
		s.HugePages = append(s.HugePages, hugePool{PageKB: 1 << 20, Pages: 1 + r.Int63n(2)})
	}
	pool := s.hugePoolBytes()
	capa := max(s.Capacity-pool, 0)
	edges := []int64{0}
	reclaim, _ := valueBytes(s.Cfg.MinReclaim["memory.available"], capa)
	for _, m := range []map[string]string{s.Cfg.Hard, s.Cfg.Soft} {
		if b, ok := valueBytes(m["memory.available"], capa); ok {
			edges = append(edges, b, b+reclaim)
		}
	}
	for i := range s.Steps {
		if r.Intn(2) == 0 {
			continue
		}
		b := pool + edges[r.Intn(len(edges))] + pick(r, int64(-1), 0, 1, -50*mi, 50*mi)
		s.Steps[i].NodeAvail = max(0, min(b, s.Capacity))
	}
}

func (s *scenario) genAvail(r *rand.Rand, capa int64) int64 {
	if len(s.thresholdsBytes) > 0 && r.Intn(3) != 0 {
		b := s.thresholdsBytes[r.Intn(len(s.thresholdsBytes))] + pick(r, int64(-1), 0, 1, -50*mi, 50*mi, 100*mi, 300*mi)
		return max(0, min(b, capa))
	}
	return r.Int63n(capa)
}

func (s *scenario) genPod(r *rand.Rand, name string) *podSpec {
	p := &podSpec{Name: name, UID: fmt.Sprintf("uid-%d-%s", s.Seed, name)}
	p.QOS = pick(r, pod.BestEffort, pod.Burstable, pod.Guaranteed)
	p.Static = r.Intn(10) == 0
	if r.Intn(2) == 0 {
		p.Priority = ptr(pick[int32](r, 0, 100, 1000, -10, 2000000000, 2000001000))
	}
	if r.Intn(5) != 0 {
		p.TGPS = ptr(pick[int64](r, 0, 5, 30, 45, 120))
	}
	for j := 0; j < 1+r.Intn(3); j++ {
		c := containerSpec{Name: fmt.Sprintf("c%d", j)}
		switch p.QOS {
		case pod.Burstable:
			c.Request = pick[int64](r, 64, 128, 256, 512) * mi
			if r.Intn(2) == 0 {
				c.Limit = 2 * c.Request
			}
		case pod.Guaranteed:
			c.Request = pick[int64](r, 64, 128, 256, 512) * mi
			c.Limit = c.Request
		}
		p.Containers = append(p.Containers, c)
	}
	return p
}

// probe is a fresh pod asking for admission; tolerations are not visible to
// cri-guard, so a probe that tolerates memory pressure is not observable.
func (s *scenario) probes() []*podSpec {
	s.probeSeq++
	var out []*podSpec
	for _, q := range []pod.QOSClass{pod.BestEffort, pod.Burstable, pod.Guaranteed} {
		for _, kind := range []string{"plain", "static", "critical", "tolerating"} {
			p := &podSpec{Name: fmt.Sprintf("probe-%s-%s", strings.ToLower(string(q)), kind), QOS: q}
			p.UID = fmt.Sprintf("probe-%d-%d-%s", s.Seed, s.probeSeq, p.Name)
			c := containerSpec{Name: "c0"}
			if q != pod.BestEffort {
				c.Request, c.Limit = 128*mi, 128*mi
				if q == pod.Burstable {
					c.Limit = 0
				}
			}
			p.Containers = []containerSpec{c}
			switch kind {
			case "static":
				p.Static = true
			case "critical":
				p.Priority = ptr[int32](2000001000)
			case "tolerating":
				p.Tolerates = true
			}
			out = append(out, p)
		}
	}
	return out
}

// valueBytes is the kubelet's evictionapi.GetThresholdQuantity for a value
// string (percentages in float32).
func valueBytes(v string, capa int64) (int64, bool) {
	if strings.HasSuffix(v, "%") {
		var f float64
		if _, err := fmt.Sscanf(strings.TrimSuffix(v, "%"), "%g", &f); err != nil {
			return 0, false
		}
		return int64(float64(capa) * float64(float32(f)/100)), true
	}
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return 0, false
	}
	return q.Value(), true
}

func ptr[T any](v T) *T { return &v }

// kubeletYAML and criYAML render the same settings for each side: the only
// syntactic difference is evictionMaxPodGracePeriod (int32 seconds in the
// kubelet, a duration string in cri-guard).
func (s *scenario) kubeletYAML() []byte { return s.Cfg.yaml(false) }
func (s *scenario) criYAML() []byte     { return s.Cfg.yaml(true) }

func (c cfgSpec) yaml(cri bool) []byte {
	var b strings.Builder
	writeMap := func(key string, m map[string]string) {
		if m == nil {
			return
		}
		if len(m) == 0 {
			fmt.Fprintf(&b, "%s: {}\n", key)
			return
		}
		fmt.Fprintf(&b, "%s:\n", key)
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "  %s: %q\n", k, m[k])
		}
	}
	writeMap("evictionHard", c.Hard)
	writeMap("evictionSoft", c.Soft)
	writeMap("evictionSoftGracePeriod", c.SoftGrace)
	writeMap("evictionMinimumReclaim", c.MinReclaim)
	if c.Transition != nil {
		fmt.Fprintf(&b, "evictionPressureTransitionPeriod: %q\n", *c.Transition)
	}
	if c.MaxPodGrace != nil {
		if cri {
			fmt.Fprintf(&b, "evictionMaxPodGracePeriod: \"%ds\"\n", *c.MaxPodGrace)
		} else {
			fmt.Fprintf(&b, "evictionMaxPodGracePeriod: %d\n", *c.MaxPodGrace)
		}
	}
	if cri {
		// the node's pods cgroup, which the kubelet always knows: cri-guard
		// watches allocatableMemory.available only with it
		b.WriteString("podsCgroup: /kubepods\n")
		// the pods' priority as a cluster policy stamps it in an annotation
		// (contrib/policy/priority-annotation.yaml): no priority
		// annotation is read unless the configuration names one
		b.WriteString("critical: {priorityAnnotation: cri-guard.io/priority}\n")
	}
	return []byte(b.String())
}

func (p *podSpec) cgroupParent() string {
	switch p.QOS {
	case pod.BestEffort:
		return "/kubepods/besteffort/pod" + p.UID
	case pod.Burstable:
		return "/kubepods/burstable/pod" + p.UID
	default:
		return "/kubepods/pod" + p.UID
	}
}

// request is the pod's memory request as the kubelet sums it
// (v1resource.GetResourceRequestQuantity without init containers or overhead).
func (p *podSpec) request() int64 {
	var n int64
	for _, c := range p.Containers {
		n += c.Request
	}
	return n
}

// kubeletPod is the v1.Pod the kubelet holds for p.
func (p *podSpec) kubeletPod() *v1.Pod {
	vp := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: "default", UID: types.UID(p.UID),
			Annotations: map[string]string{"kubernetes.io/config.source": "api"}},
		Spec: v1.PodSpec{Priority: p.Priority, TerminationGracePeriodSeconds: p.TGPS},
	}
	if p.Static {
		vp.Annotations["kubernetes.io/config.source"] = "file"
	}
	if p.Tolerates {
		vp.Spec.Tolerations = []v1.Toleration{{Key: v1.TaintNodeMemoryPressure, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule}}
	}
	for _, c := range p.Containers {
		vc := v1.Container{Name: c.Name}
		if c.Request > 0 {
			vc.Resources.Requests = v1.ResourceList{v1.ResourceMemory: *resource.NewQuantity(c.Request, resource.BinarySI)}
			if p.QOS == pod.Guaranteed {
				vc.Resources.Requests[v1.ResourceCPU] = resource.MustParse("100m")
			}
		}
		if c.Limit > 0 {
			vc.Resources.Limits = v1.ResourceList{v1.ResourceMemory: *resource.NewQuantity(c.Limit, resource.BinarySI)}
			if p.QOS == pod.Guaranteed {
				vc.Resources.Limits[v1.ResourceCPU] = resource.MustParse("100m")
			}
		}
		vp.Spec.Containers = append(vp.Spec.Containers, vc)
	}
	return vp
}
