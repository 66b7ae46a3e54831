package admin

import (
	"slices"
	"time"

	"github.com/cri-guard/cri-guard/evictor"
	"github.com/cri-guard/cri-guard/pod"
	"github.com/cri-guard/cri-guard/pressure"
)

// Status is the document GET /status returns.
type Status struct {
	// Time is when the document was built.
	Time time.Time `json:"time"`
	// Version is cri-guard's version.
	Version string `json:"version"`
	// DryRun is true when evictions are only logged.
	DryRun bool `json:"dryRun"`
	// Runtime is the connection to containerd.
	Runtime Runtime `json:"runtime"`
	// SampledAt is when pressure was last sampled; Source where from.
	SampledAt time.Time `json:"sampledAt"`
	Source    string    `json:"source,omitempty"`
	// StatsError is set when the last sample failed.
	StatsError string `json:"statsError,omitempty"`
	// Conditions are the node conditions now set (MemoryPressure).
	Conditions []string `json:"conditions"`
	// Signals are the observed signals against their thresholds.
	Signals []Signal `json:"signals"`
	// Met are the thresholds acting at the last evaluation, as the eviction
	// manager renders them.
	Met []string `json:"met,omitempty"`
	// Pods are the pods cri-guard knows: evictable ready pods in eviction
	// order first (Rank 1 is evicted first), then the others.
	Pods []Pod `json:"pods"`
	// Decisions are the recent admission and eviction decisions, oldest first.
	Decisions []evictor.Decision `json:"decisions"`
}

// Runtime describes the runtime connection.
type Runtime struct {
	Endpoint string `json:"endpoint"`
	// State is the gRPC connectivity state (READY, CONNECTING, IDLE,
	// TRANSIENT_FAILURE, SHUTDOWN).
	State     string `json:"state"`
	Connected bool   `json:"connected"`
}

// Signal is one eviction signal: what was observed and the thresholds on it.
type Signal struct {
	Signal string `json:"signal"`
	// Observed is the observation rendered ("1.2Gi", "3.5%"); empty when
	// the signal was not observed.
	Observed string `json:"observed,omitempty"`
	// Value is the observation as a number: bytes or percent.
	Value      float64     `json:"value"`
	Thresholds []Threshold `json:"thresholds,omitempty"`
}

// Threshold is one threshold on a signal.
type Threshold struct {
	// Kind is hard or soft.
	Kind string `json:"kind"`
	// Value is the threshold as configured ("100Mi", "10%").
	Value string `json:"value"`
	// Limit is the threshold in Signal.Value's unit (0 when a percentage
	// cannot be resolved yet).
	Limit float64 `json:"limit"`
	// Crossed is true when the last observation is beyond the limit.
	Crossed     bool   `json:"crossed"`
	GracePeriod string `json:"gracePeriod,omitempty"`
	MinReclaim  string `json:"minReclaim,omitempty"`
}

// Pod is one pod in the status.
type Pod struct {
	// Rank is the eviction order among evictable ready pods, from 1; 0 for
	// pods that are not candidates (critical, not ready).
	Rank      int    `json:"rank"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	Attempt   uint32 `json:"attempt"`
	QOS       string `json:"qos"`
	Critical  bool   `json:"critical"`
	Evictable bool   `json:"evictable"`
	Priority  int32  `json:"priority"`
	State     string `json:"state"`
	SandboxID string `json:"sandboxId,omitempty"`
	// HasStats is false when the pod's cgroup could not be read.
	HasStats        bool  `json:"hasStats"`
	WorkingSetBytes int64 `json:"workingSetBytes"`
	RequestBytes    int64 `json:"requestBytes"`
}

// Sources is what Build reads. Every function may be nil.
type Sources struct {
	Version string
	DryRun  bool
	// Snapshot is evictor.Manager.Snapshot.
	Snapshot func() evictor.Status
	// Pods is guard.Loop.Pods.
	Pods func() []*pod.Pod
	// Thresholds returns the thresholds in force.
	Thresholds func() []pressure.Threshold
	// PodStats reads a pod's cgroup (pressure.Sampler.Pod).
	PodStats func(cgroupParent string) (pressure.PodStats, error)
	// Runtime describes the runtime connection.
	Runtime func() Runtime
	// Now stamps the document; default time.Now.
	Now func() time.Time
}

// Build assembles a Status from src.
func Build(src Sources) Status {
	now := time.Now
	if src.Now != nil {
		now = src.Now
	}
	s := Status{Time: now(), Version: src.Version, DryRun: src.DryRun, Conditions: []string{}, Signals: []Signal{}, Pods: []Pod{}, Decisions: []evictor.Decision{}}
	var snap evictor.Status
	if src.Snapshot != nil {
		snap = src.Snapshot()
	}
	s.SampledAt, s.Source, s.StatsError, s.Met = snap.SampledAt, snap.Source, snap.StatsError, snap.Met
	if snap.Conditions != nil {
		s.Conditions = snap.Conditions
	}
	if snap.Decisions != nil {
		s.Decisions = snap.Decisions
	}
	if src.Runtime != nil {
		s.Runtime = src.Runtime()
	}
	var ts []pressure.Threshold
	if src.Thresholds != nil {
		ts = src.Thresholds()
	}
	s.Signals = signals(snap.Observed, ts)
	if src.Pods != nil {
		s.Pods = pods(src.Pods(), src.PodStats)
	}
	return s
}

// signals lists every observed or thresholded signal, sorted by name.
func signals(obs map[pressure.Signal]pressure.Observation, ts []pressure.Threshold) []Signal {
	names := make([]pressure.Signal, 0, len(obs)+len(ts))
	for sig := range obs {
		names = append(names, sig)
	}
	for _, t := range ts {
		names = append(names, t.Signal)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	out := make([]Signal, 0, len(names))
	for _, sig := range names {
		o, observed := obs[sig]
		s := Signal{Signal: string(sig)}
		if observed {
			s.Observed, s.Value = o.String(), o.Value()
		}
		for _, t := range ts {
			if t.Signal != sig {
				continue
			}
			th := Threshold{Kind: "soft", Value: t.Value.String()}
			if t.Hard {
				th.Kind = "hard"
			}
			if t.GracePeriod > 0 {
				th.GracePeriod = t.GracePeriod.String()
			}
			if t.MinReclaim != nil {
				th.MinReclaim = t.MinReclaim.String()
			}
			if limit, ok := t.Limit(o); ok {
				th.Limit = limit
				th.Crossed = observed && crossed(t, s.Value, limit)
			}
			s.Thresholds = append(s.Thresholds, th)
		}
		out = append(out, s)
	}
	return out
}

func crossed(t pressure.Threshold, v, limit float64) bool {
	if t.Operator == pressure.OpGreaterThan {
		return v > limit
	}
	return v < limit
}

// pods ranks the evictable ready pods as the eviction manager does, with
// fresh stats, and lists the others after them.
func pods(ps []*pod.Pod, stats func(string) (pressure.PodStats, error)) []Pod {
	var cands []evictor.Candidate
	var others []Pod
	for _, p := range ps {
		c := evictor.Candidate{Pod: p}
		if stats != nil && p.State == pod.StateReady {
			if st, err := stats(p.CgroupParent); err == nil && st.HasMemory {
				c.HasStats, c.WorkingSet, c.Request = true, st.WorkingSetBytes, st.RequestBytes
			}
		}
		if p.Evictable && p.State == pod.StateReady {
			cands = append(cands, c)
			continue
		}
		others = append(others, podOf(c, 0))
	}
	evictor.Rank(cands)
	out := make([]Pod, 0, len(ps))
	for i, c := range cands {
		out = append(out, podOf(c, i+1))
	}
	return append(out, others...)
}

func podOf(c evictor.Candidate, rank int) Pod {
	p := c.Pod
	return Pod{
		Rank: rank, Namespace: p.Namespace, Name: p.Name, UID: p.UID, Attempt: p.Attempt,
		QOS: string(p.QOS), Critical: p.Critical, Evictable: p.Evictable, Priority: p.Priority,
		State: string(p.State), SandboxID: p.SandboxID,
		HasStats: c.HasStats, WorkingSetBytes: c.WorkingSet, RequestBytes: c.Request,
	}
}
