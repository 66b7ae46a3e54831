package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	evictionapi "k8s.io/kubernetes/pkg/kubelet/eviction/api"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"

	"github.com/cri-guard/cri-guard/internal/config"
	"github.com/cri-guard/cri-guard/internal/evictor"
	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/pressure"
)

// Fields compared, in table order.
const (
	FieldConfig     = "config"
	FieldConditions = "conditions"
	FieldAdmission  = "admission"
	FieldVictim     = "victim"
	FieldVictimCRI  = "victim (CRI only, no requests)"
	FieldGrace      = "grace"
	FieldMessage    = "message (eviction)"
	FieldAdmitMsg   = "message (admission)"
	// FieldAdmissionAPI is the admission of pods whose decision needs
	// what only the API says (tolerations), with it applied as cri-guard's
	// kube package does (pod.CriticalRules.ApplyAPI).
	FieldAdmissionAPI = "admission (with the API)"
)

var fieldOrder = []string{FieldConfig, FieldConditions, FieldAdmission, FieldAdmissionAPI, FieldVictim, FieldVictimCRI, FieldGrace, FieldMessage, FieldAdmitMsg}

// tally counts one field: compared, agreed, and not observable by CRI.
type tally struct{ Compared, Agreed, NotObservable int }

// difference is one disagreement, with its cause.
type difference struct {
	Field, Cause, Detail string
	Seed                 int64
	Step                 int
}

// report is the outcome of a run.
type report struct {
	Scenarios int
	Tallies   map[string]*tally
	Diffs     []difference
	NA        map[string]int // not-observable reasons
	// Kills are the kubelet's eviction messages by seed and step, so that
	// a targeted scenario's expectations can be checked against the
	// kubelet itself.
	Kills map[int64]map[int]string
}

func (r *report) kubeletKill(s *scenario, step int, message string) {
	if r.Kills[s.Seed] == nil {
		r.Kills[s.Seed] = map[int]string{}
	}
	r.Kills[s.Seed][step] = message
}

func newReport() *report {
	r := &report{Tallies: map[string]*tally{}, NA: map[string]int{}, Kills: map[int64]map[int]string{}}
	for _, f := range fieldOrder {
		r.Tallies[f] = &tally{}
	}
	return r
}

func (r *report) agree(field string) { r.Tallies[field].Compared++; r.Tallies[field].Agreed++ }

func (r *report) differ(d difference) { r.Tallies[d.Field].Compared++; r.Diffs = append(r.Diffs, d) }

func (r *report) notObservable(field, why string) {
	r.Tallies[field].NotObservable++
	r.NA[field+": "+why]++
}

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// runScenario runs one scenario on both sides and adds to r.
func runScenario(s *scenario, dir string, r *report) error {
	r.Scenarios++
	kc, kerr := loadKubeletConfig(dir, s.kubeletYAML())
	cc, ths, cerr := loadCRIConfig(s.criYAML())
	if kerr != nil || cerr != nil {
		if (kerr == nil) != (cerr == nil) {
			r.differ(difference{Field: FieldConfig, Seed: s.Seed, Cause: "config accepted by one side only",
				Detail: fmt.Sprintf("kubelet: %v; cri-guard: %v; config:\n%s", kerr, cerr, s.kubeletYAML())})
		} else {
			r.agree(FieldConfig)
		}
		return nil
	}
	causes := compareConfig(s, kc, cc, ths)
	// Which release each side follows: the kubelet's feature gate, and
	// what cri-guard's configuration says (kubeletCompatibility).
	if kubeletSubtractsHugePages() != cc.SubtractHugePages() {
		causes = append(causes, cause{"huge pages: the kubelet and cri-guard follow different releases",
			fmt.Sprintf("kubelet HugepageAwareEviction %v, cri-guard kubeletCompatibility %s", kubeletSubtractsHugePages(), cc.KubeletCompatibility)})
	}
	if len(causes) == 0 {
		r.agree(FieldConfig)
	} else {
		for _, c := range causes {
			r.differ(difference{Field: FieldConfig, Seed: s.Seed, Cause: c.Cause, Detail: c.Detail})
		}
	}
	scenCause := "unexplained"
	if len(causes) > 0 {
		var names []string
		for _, c := range causes {
			if !strings.HasPrefix(c.Cause, "(5)") { // grace only: no bearing on conditions, admission, victim
				names = append(names, c.Cause)
			}
		}
		if len(names) > 0 {
			scenCause = "config: " + strings.Join(names, " + ")
		}
	}

	// The node's files: the fake sysfs tree both cadvisor (for the
	// kubelet's Node) and cri-guard's sampler read the huge page pool from,
	// and the proc and cgroup files cri-guard's sampler reads memory from.
	nodeDir := filepath.Join(dir, "node")
	if err := os.RemoveAll(nodeDir); err != nil {
		return err
	}
	if err := writeHugePages(filepath.Join(nodeDir, "sys"), s.HugePages); err != nil {
		return err
	}
	node, err := kubeletNode(s.Capacity, filepath.Join(nodeDir, "sys"))
	if err != nil {
		return err
	}
	k, err := newKubeletSide(kc, start, node)
	if err != nil {
		return err
	}
	now := start
	nodeFiles, err := newNodeFiles(filepath.Join(nodeDir), s.Capacity, cc.SubtractHugePages(), func() time.Time { return now })
	if err != nil {
		return err
	}
	withReq, err := newCRISide(cc, ths, start, true)
	if err != nil {
		return err
	}
	criOnly, err := newCRISide(cc, ths, start, false)
	if err != nil {
		return err
	}
	rules := cc.CriticalRules()
	active := slices.Clone(s.Pods)
	for i, st := range s.Steps {
		now = now.Add(st.Advance)
		k.clock.SetTime(now)
		k.summary, k.pods = s.summary(st, active, now)
		kk, err := k.synchronize()
		if err != nil {
			return fmt.Errorf("seed %d step %d: kubelet synchronize: %w", s.Seed, i, err)
		}
		if kk != nil {
			r.kubeletKill(s, i, kk.Message)
		}
		ns, err := nodeFiles.sample(s.Capacity - st.NodeAvail)
		if err != nil {
			return fmt.Errorf("seed %d step %d: cri-guard sampler: %w", s.Seed, i, err)
		}
		var acting []actingThreshold
		if kk != nil {
			acting = k.actingThresholds()
		}
		var evs [2]*evictor.Eviction
		for j, c := range []*criSide{withReq, criOnly} {
			c.now = now
			c.node, c.stats = s.sample(ns, st, active, c.requests)
			pods := make([]*pod.Pod, 0, len(active))
			for _, p := range active {
				cp, err := criPod(p, rules, now)
				if err != nil {
					return err
				}
				pods = append(pods, cp)
			}
			// a housekeeping tick with nothing under way (each eviction
			// settles at once here): only the choice
			a := c.mgr.Synchronize(evictor.Pass{Active: pods})
			e, err := a.Evict, a.Err
			if err != nil {
				return fmt.Errorf("seed %d step %d: cri-guard synchronize: %w", s.Seed, i, err)
			}
			if e != nil {
				// what cri-guard's loop adds from the runtime's container
				// stats before the stop (guard containerMessage): requests
				// from the API when it has them (withReq), else only a
				// BestEffort pod's (none)
				e.Message += evictor.ContainerMessage(containerMemory(p0(active, e.Pod.UID), st, c.requests))
				c.mgr.Evicted(e)
			}
			evs[j] = e
		}
		d := func(field, cause, detail string) {
			r.differ(difference{Field: field, Cause: cause, Seed: s.Seed, Step: i, Detail: detail})
		}
		// Conditions.
		kp := k.mgr.IsUnderMemoryPressure()
		cp := slices.Contains(withReq.mgr.Snapshot().Conditions, pressure.ConditionMemoryPressure)
		if kp == cp {
			r.agree(FieldConditions)
		} else {
			d(FieldConditions, scenCause, fmt.Sprintf("kubelet MemoryPressure=%v cri-guard=%v (node available %d, pods available %d)", kp, cp, st.NodeAvail, st.AllocAvail))
		}
		// Victim, grace, message.
		s.compareEviction(r, i, st, active, kc.Eviction.MaxPodGracePeriodSeconds, cc.EvictionMaxPodGracePeriod.Duration, kk, acting, evs, scenCause)
		// Admission of fresh pods.
		for _, p := range s.probes() {
			ka := k.admit.Admit(context.Background(), &lifecycle.PodAdmitAttributes{Pod: p.kubeletPod(), Operation: lifecycle.AddOperation})
			cpod, err := criPod(p, rules, now)
			if err != nil {
				return err
			}
			ca := withReq.mgr.Admit(&evictor.Attributes{Pod: cpod})
			if p.Tolerates {
				// what the API adds: the toleration
				apiPod := cpod.Clone()
				rules.ApplyAPI(apiPod, pod.API{ToleratesMemoryPressure: true})
				if aa := withReq.mgr.Admit(&evictor.Attributes{Pod: apiPod}); aa.Admit == ka.Admit {
					r.agree(FieldAdmissionAPI)
				} else {
					d(FieldAdmissionAPI, "unexplained", fmt.Sprintf("%s: kubelet admit=%v cri-guard with the API admit=%v", p.Name, ka.Admit, aa.Admit))
				}
			}
			if ka.Admit != ca.Admit {
				if p.Tolerates {
					r.notObservable(FieldAdmission, "tolerations are not in the CRI request")
					continue
				}
				d(FieldAdmission, scenCause, fmt.Sprintf("%s: kubelet admit=%v cri-guard admit=%v", p.Name, ka.Admit, ca.Admit))
				continue
			}
			r.agree(FieldAdmission)
			if ka.Admit {
				continue
			}
			// cri-guard's refusal is the kubelet's message followed by what
			// it observed ("Observed memory.available 80Mi < 100Mi. "), as
			// the kubelet's sentence must be the prefix
			rest, prefixed := strings.CutPrefix(ca.Message, ka.Message)
			if ka.Reason == ca.Reason && prefixed && (rest == "" || strings.HasPrefix(rest, "Observed ")) {
				r.agree(FieldAdmitMsg)
			} else {
				d(FieldAdmitMsg, "unexplained", fmt.Sprintf("kubelet %q %q; cri-guard %q %q", ka.Reason, ka.Message, ca.Reason, ca.Message))
			}
		}
		if kk != nil {
			active = slices.DeleteFunc(active, func(p *podSpec) bool { return p.UID == string(kk.Pod.UID) })
		}
	}
	return nil
}

// summary is the kubelet's stats summary for a step.
func (s *scenario) summary(st step, active []*podSpec, now time.Time) (*statsapi.Summary, []*v1.Pod) {
	t := metav1.NewTime(now)
	u64 := func(v int64) *uint64 { x := uint64(v); return &x }
	sum := &statsapi.Summary{Node: statsapi.NodeStats{
		NodeName: "node",
		Memory:   &statsapi.MemoryStats{Time: t, AvailableBytes: u64(st.NodeAvail), WorkingSetBytes: u64(s.Capacity - st.NodeAvail)},
		SystemContainers: []statsapi.ContainerStats{{Name: statsapi.SystemContainerPods,
			Memory: &statsapi.MemoryStats{Time: t, AvailableBytes: u64(st.AllocAvail), WorkingSetBytes: u64(s.AllocCap - st.AllocAvail)}}},
	}}
	var pods []*v1.Pod
	for _, p := range active {
		pods = append(pods, p.kubeletPod())
		u, ok := st.Usage[p.UID]
		if !ok {
			continue
		}
		ps := statsapi.PodStats{PodRef: statsapi.PodReference{Name: p.Name, Namespace: "default", UID: p.UID}}
		var total int64
		for j, c := range p.Containers {
			total += u[j]
			ps.Containers = append(ps.Containers, statsapi.ContainerStats{Name: c.Name, Memory: &statsapi.MemoryStats{Time: t, WorkingSetBytes: u64(u[j])}})
		}
		ps.Memory = &statsapi.MemoryStats{Time: t, WorkingSetBytes: u64(total)}
		sum.Pods = append(sum.Pods, ps)
	}
	return sum, pods
}

// sample is cri-guard's view of the same step: the node's figures as its
// sampler read them from the step's files (n), the pods cgroup's and the
// pods' from the scenario.
func (s *scenario) sample(n pressure.NodeSample, st step, active []*podSpec, requests bool) (pressure.NodeSample, map[string]pressure.PodStats) {
	n.HasAllocatable, n.AllocatableCapacityBytes, n.AllocatableAvailableBytes = true, s.AllocCap, st.AllocAvail
	stats := map[string]pressure.PodStats{}
	for _, p := range active {
		u, ok := st.Usage[p.UID]
		if !ok {
			continue
		}
		ps := pressure.PodStats{HasMemory: true}
		for _, v := range u {
			ps.WorkingSetBytes += v
		}
		ps.UsageBytes = ps.WorkingSetBytes
		if requests && p.request() > 0 {
			ps.HasRequest, ps.RequestBytes = true, p.request()
		}
		stats[p.cgroupParent()] = ps
	}
	return n, stats
}

// rankKey is what the kubelet's rankMemoryPressure compares: pods with equal
// keys are kubelet ties (its sort is not stable, and not even insertion order
// past 12 pods).
type rankKey struct {
	HasStats, Exceeds bool
	Priority          int32
	Over              int64
}

func (s *scenario) key(p *podSpec, st step, requests bool) rankKey {
	k := rankKey{}
	if p.Priority != nil {
		k.Priority = *p.Priority
	}
	u, ok := st.Usage[p.UID]
	if !ok {
		return k
	}
	var total int64
	for _, v := range u {
		total += v
	}
	req := int64(0)
	if requests {
		req = p.request()
	}
	k.HasStats, k.Exceeds, k.Over = true, total > req, total-req
	return k
}

func critical(p *podSpec) bool {
	return p.Static || (p.Priority != nil && *p.Priority >= 2000000000)
}

func (s *scenario) compareEviction(r *report, i int, st step, active []*podSpec, kMax int64, cMax time.Duration,
	kk *kubeletKill, acting []actingThreshold, evs [2]*evictor.Eviction, scenCause string) {
	byUID := map[string]*podSpec{}
	for _, p := range active {
		byUID[p.UID] = p
	}
	name := func(e *evictor.Eviction) string {
		if e == nil {
			return "none"
		}
		return e.Pod.Name
	}
	kname := "none"
	if kk != nil {
		kname = kk.Pod.Name
	}
	for j, e := range evs {
		field := FieldVictim
		if j == 1 {
			field = FieldVictimCRI
		}
		switch {
		case kk == nil && e == nil:
			r.agree(field)
			continue
		case kk != nil && e != nil:
			kp, cp := byUID[string(kk.Pod.UID)], byUID[e.Pod.UID]
			if cp != nil && s.key(kp, st, true) == s.key(cp, st, true) {
				r.agree(field)
				continue
			}
			if j == 1 && cp != nil && s.key(cp, st, false) == s.topKey(active, st, false) {
				r.notObservable(field, "the victim depends on memory requests")
				continue
			}
		}
		r.differ(difference{Field: field, Cause: scenCause, Seed: s.Seed, Step: i,
			Detail: fmt.Sprintf("kubelet evicts %s, cri-guard %s", kname, name(e))})
	}
	e := evs[0]
	if kk == nil || e == nil || e.Pod.UID != string(kk.Pod.UID) {
		if kk != nil && e != nil && e.Pod.UID != string(kk.Pod.UID) {
			r.notObservable(FieldGrace, "kubelet tie: another pod of the same rank")
			r.notObservable(FieldMessage, "kubelet tie: another pod of the same rank")
		}
		return
	}
	p := byUID[e.Pod.UID]
	// Grace: the kubelet's for each threshold it may have acted on.
	alts := map[int64]bool{kk.Grace: true}
	softZero := false
	for _, a := range acting {
		g := int64(1)
		if a.T.GracePeriod != 0 {
			g = kMax
			if p.TGPS != nil {
				g = min(kMax, *p.TGPS)
			}
		}
		alts[g] = true
	}
	for _, t := range s.Cfg.SoftGrace {
		softZero = softZero || t == "0s"
	}
	cg := criGrace(e, p.TGPS)
	if alts[int64(cg/time.Second)] && cg%time.Second == 0 {
		r.agree(FieldGrace)
	} else {
		cause := "unexplained"
		switch {
		case time.Duration(kMax)*time.Second != cMax && !(kk.Grace == 1 && softZero):
			cause = "(5) evictionMaxPodGracePeriod: kubelet default 0"
		case kk.Grace == 1 && softZero:
			cause = "(1) a soft threshold with grace 0s is hard in the kubelet (isHardEvictionThreshold): grace 1s"
		case p.TGPS != nil && kk.Grace == min(kMax, *p.TGPS):
			cause = "(2) soft-eviction grace is min(evictionMaxPodGracePeriod, terminationGracePeriodSeconds)"
		}
		r.differ(difference{Field: FieldGrace, Cause: cause, Seed: s.Seed, Step: i,
			Detail: fmt.Sprintf("%s: kubelet %ds, cri-guard %v (tgps %v, max %ds/%v)", p.Name, kk.Grace, cg, deref(p.TGPS), kMax, cMax)})
	}
	// Message: the kubelet's, with any acting threshold's figures.
	const head = "The node was low on resource: memory. "
	prefixes := []string{}
	for _, a := range acting {
		prefixes = append(prefixes, head+fmt.Sprintf("Threshold quantity: %v, available: %v. ", a.Quantity, a.Available))
	}
	suffix, kPrefix := "", kk.Message
	for _, pre := range prefixes {
		if strings.HasPrefix(kk.Message, pre) {
			kPrefix, suffix = pre, kk.Message[len(pre):]
			break
		}
	}
	if !slices.Contains(prefixes, kPrefix) {
		prefixes = append(prefixes, kPrefix)
	}
	ok := false
	for _, pre := range prefixes {
		ok = ok || e.Message == pre+suffix
	}
	if ok {
		r.agree(FieldMessage)
		return
	}
	var causes []string
	cPrefix, cSuffix := e.Message, ""
	if at := strings.Index(e.Message, "Container "); at >= 0 {
		cPrefix, cSuffix = e.Message[:at], e.Message[at:]
	}
	if !slices.Contains(prefixes, cPrefix) {
		pct := false
		for _, a := range acting {
			pct = pct || a.T.Value.Quantity == nil
		}
		if pct {
			causes = append(causes, "(6a) the kubelet prints a percentage threshold as bytes")
		} else {
			causes = append(causes, "threshold figures differ, "+scenCause)
		}
	}
	if cSuffix != suffix {
		if cSuffix == "" {
			causes = append(causes, "(6b) the kubelet adds \"Container C was using U, request is R\" for containers over their request")
		} else {
			causes = append(causes, "container lines differ")
		}
	}
	r.differ(difference{Field: FieldMessage, Cause: strings.Join(causes, " + "), Seed: s.Seed, Step: i,
		Detail: fmt.Sprintf("kubelet %q; cri-guard %q", kk.Message, e.Message)})
}

func (s *scenario) topKey(active []*podSpec, st step, requests bool) rankKey {
	var best *rankKey
	for _, p := range active {
		if critical(p) {
			continue
		}
		k := s.key(p, st, requests)
		if best == nil || less(k, *best) {
			best = &k
		}
	}
	if best == nil {
		return rankKey{}
	}
	return *best
}

// less is the kubelet's order: no stats first, then exceeding the request,
// lower priority, larger usage over the request.
func less(a, b rankKey) bool {
	if a.HasStats != b.HasStats {
		return !a.HasStats
	}
	if a.Exceeds != b.Exceeds {
		return a.Exceeds
	}
	if a.Priority != b.Priority {
		return a.Priority < b.Priority
	}
	return a.Over > b.Over
}

func deref[T any](p *T) any {
	if p == nil {
		return "unset"
	}
	return *p
}

// compareConfig returns the causes of any difference between the thresholds
// and settings each side derived from the same file.
func compareConfig(s *scenario, kc kubeletConfig, cc config.Config, ths []pressure.Threshold) []cause {
	var causes []cause
	type norm struct {
		Signal  string
		Hard    bool
		Value   string
		Grace   time.Duration
		Reclaim string
	}
	val := func(q *resource.Quantity, pct float64) string {
		if q != nil {
			return q.String()
		}
		return fmt.Sprintf("%.7g%%", pct*100)
	}
	var kt, ct []norm
	for _, t := range kc.Eviction.Thresholds {
		if t.Signal != evictionapi.SignalMemoryAvailable && t.Signal != evictionapi.SignalAllocatableMemoryAvailable {
			continue
		}
		n := norm{Signal: string(t.Signal), Hard: t.GracePeriod == 0, Value: val(t.Value.Quantity, float64(t.Value.Percentage)), Grace: t.GracePeriod}
		if t.MinReclaim != nil {
			n.Reclaim = val(t.MinReclaim.Quantity, float64(t.MinReclaim.Percentage))
		}
		kt = append(kt, n)
	}
	for _, t := range ths {
		n := norm{Signal: string(t.Signal), Hard: t.Hard, Value: val(t.Value.Quantity, t.Value.Percentage), Grace: t.GracePeriod}
		if t.MinReclaim != nil {
			n.Reclaim = val(t.MinReclaim.Quantity, t.MinReclaim.Percentage)
		}
		ct = append(ct, n)
	}
	cmpNorm := func(a, b norm) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) }
	slices.SortFunc(kt, cmpNorm)
	slices.SortFunc(ct, cmpNorm)
	if !slices.Equal(kt, ct) {
		detail := fmt.Sprintf("kubelet %v, cri-guard %v", kt, ct)
		count := func(ns []norm, signal string, hard bool) int {
			n := 0
			for _, t := range ns {
				if t.Signal == signal && t.Hard == hard {
					n++
				}
			}
			return n
		}
		softZero := false // cri-guard keeps a soft threshold with grace 0 soft
		for _, t := range ct {
			softZero = softZero || (!t.Hard && t.Grace == 0)
		}
		before := len(causes)
		if _, ok := s.Cfg.Hard["memory.available"]; s.Cfg.Hard != nil && !ok && count(ct, "memory.available", true) > count(kt, "memory.available", true) {
			causes = append(causes, cause{"(3) a config file's evictionHard replaces the defaults", detail})
		}
		if softZero {
			causes = append(causes, cause{"(1) a soft threshold with grace 0s is hard in the kubelet", detail})
		}
		if count(kt, "allocatableMemory.available", true) > count(ct, "allocatableMemory.available", true)+count(ct, "allocatableMemory.available", false)-count(kt, "allocatableMemory.available", false) {
			causes = append(causes, cause{"(7) enforceNodeAllocatable [pods] copies hard memory.available thresholds to allocatableMemory.available (helpers.go addAllocatableThresholds)", detail})
		}
		if len(causes) == before {
			causes = append(causes, cause{"thresholds differ", detail})
		}
	}
	if kc.Eviction.PressureTransitionPeriod != cc.EvictionPressureTransitionPeriod.Duration {
		c := "transition period differs"
		if s.Cfg.Transition != nil && *s.Cfg.Transition == "0s" {
			c = "(4) evictionPressureTransitionPeriod 0s means 5m in the kubelet"
		}
		causes = append(causes, cause{c, fmt.Sprintf("%q: kubelet %v, cri-guard %v", deref(s.Cfg.Transition), kc.Eviction.PressureTransitionPeriod, cc.EvictionPressureTransitionPeriod.Duration)})
	}
	if time.Duration(kc.Eviction.MaxPodGracePeriodSeconds)*time.Second != cc.EvictionMaxPodGracePeriod.Duration {
		causes = append(causes, cause{"(5) evictionMaxPodGracePeriod defaults to 0 in the kubelet", fmt.Sprintf("%v: kubelet %ds, cri-guard %v", deref(s.Cfg.MaxPodGrace), kc.Eviction.MaxPodGracePeriodSeconds, cc.EvictionMaxPodGracePeriod.Duration)})
	}
	return causes
}

// cause is a difference's cause, constant so that differences group, and the
// scenario's particulars.
type cause struct{ Cause, Detail string }

// p0 finds the active pod with this UID.
func p0(active []*podSpec, uid string) *podSpec {
	for _, p := range active {
		if p.UID == uid {
			return p
		}
	}
	return nil
}

// containerMemory is what cri-guard knows of a pod's containers for its
// eviction message: the stats of this step, and the requests when they are
// observable (withRequests: the API's; else only a BestEffort pod's zero).
func containerMemory(p *podSpec, st step, withRequests bool) []evictor.ContainerMemory {
	if p == nil {
		return nil
	}
	usage, ok := st.Usage[p.UID]
	if !ok {
		return nil
	}
	var out []evictor.ContainerMemory
	for j, c := range p.Containers {
		var req *resource.Quantity
		switch {
		case withRequests:
			q := resource.Quantity{}
			if c.Request > 0 {
				q = *resource.NewQuantity(c.Request, resource.BinarySI)
			}
			req = &q
		case p.QOS == pod.BestEffort:
			req = &resource.Quantity{}
		}
		out = append(out, evictor.ContainerMemory{Name: c.Name, WorkingSetBytes: usage[j], Request: req})
	}
	return out
}
