package admin

import (
	"slices"
	"time"

	"github.com/cri-guard/cri-guard/internal/evictor"
	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/pressure"
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
	// StatsError is set when the last sample failed (the figures shown are
	// then those of the last good sample, at SampledAt).
	StatsError string `json:"statsError,omitempty"`
	// SignalErrors say why signals are missing from the last sample, and
	// which thresholds' signals it lacks.
	SignalErrors []string `json:"signalErrors,omitempty"`
	// HugePages is the node's huge page pool in the last sample; nil when
	// it has none.
	HugePages *HugePages `json:"hugePages,omitempty"`
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
	// API is the connection to the API server; nil without one.
	API *API `json:"api,omitempty"`
	// Degraded says why cri-guard serves without a finished restore
	// (restored pods unknown, retried); empty normally.
	Degraded string `json:"degraded,omitempty"`
	// Problems are the parts cri-guard serves CRI without ("part:
	// reason": the config file, the metrics or admin listener, the API
	// connection), each retried in the background; empty normally.
	Problems []string `json:"problems,omitempty"`
	// State is the state directory's checkpoint store and the records not
	// written to it; nil when not known. Apart from Degraded: a restore
	// may be finished while the records stay in memory, and the reverse.
	State *State `json:"state,omitempty"`
}

// State describes the state directory.
type State struct {
	Dir string `json:"dir"`
	// Available is false while the directory cannot be opened (Error says
	// why, first found at Since): records are kept in memory only, and
	// opening it is retried.
	Available bool      `json:"available"`
	Error     string    `json:"error,omitempty"`
	Since     time.Time `json:"since,omitzero"`
	// Unsaved counts the records in memory only (their last write
	// failed); LastWriteError is the last failure, FailingSince the first
	// since all were written, NextRetry when they are written again if
	// later than the next housekeeping pass.
	Unsaved        int       `json:"unsaved"`
	LastWriteError string    `json:"lastWriteError,omitempty"`
	FailingSince   time.Time `json:"failingSince,omitzero"`
	NextRetry      time.Time `json:"nextRetry,omitzero"`
}

// HugePages is the node's huge page pool.
type HugePages struct {
	Bytes int64 `json:"bytes"`
	// Subtracted says memory.available has the pool taken off, as the
	// kubelet does from 1.37 (kubeletCompatibility).
	Subtracted bool `json:"subtracted"`
}

// API describes the connection to the API server.
type API struct {
	Node string `json:"node"`
	// Synced is true once the pods bound to the node have been listed.
	Synced bool `json:"synced"`
	// Pending counts the reports (pod status, node condition) not written yet.
	Pending   int       `json:"pending"`
	LastError string    `json:"lastError,omitempty"`
	LastOK    time.Time `json:"lastOK,omitzero"`
	// Unreported counts refusals not reported Failed, each owner's
	// rejections being over their bound (left to the kubelet's back-off).
	Unreported int `json:"unreported,omitempty"`
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
	Crossed bool `json:"crossed"`
	// Acting: the threshold acts (evictions follow); Pending: a soft
	// threshold met within its grace period; ByMinReclaim: acting only
	// until the minimum reclaim is reached; Since: first met.
	Acting       bool       `json:"acting"`
	Pending      bool       `json:"pending,omitempty"`
	ByMinReclaim bool       `json:"byMinReclaim,omitempty"`
	Since        *time.Time `json:"since,omitempty"`
	GracePeriod  string     `json:"gracePeriod,omitempty"`
	MinReclaim   string     `json:"minReclaim,omitempty"`
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
	// Runtime describes the runtime connection.
	Runtime func() Runtime
	// API describes the API server connection; nil without one.
	API func() API
	// Degraded is guard.Loop.Degraded; may be nil.
	Degraded func() error
	// Problems lists the degraded parts; may be nil.
	Problems func() []string
	// State describes the state directory; may be nil.
	State func() State
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
	s.SignalErrors = snap.SignalErrors
	if snap.HugePagesBytes > 0 {
		s.HugePages = &HugePages{Bytes: snap.HugePagesBytes, Subtracted: snap.HugePagesSubtracted}
	}
	if snap.Conditions != nil {
		s.Conditions = snap.Conditions
	}
	if snap.Decisions != nil {
		s.Decisions = snap.Decisions
	}
	if src.Runtime != nil {
		s.Runtime = src.Runtime()
	}
	if src.API != nil {
		a := src.API()
		s.API = &a
	}
	if src.Degraded != nil {
		if err := src.Degraded(); err != nil {
			s.Degraded = err.Error()
		}
	}
	if src.Problems != nil {
		s.Problems = src.Problems()
	}
	if src.State != nil {
		st := src.State()
		s.State = &st
	}
	s.Signals = signals(snap.Observed, snap.Thresholds)
	var ps []*pod.Pod
	if src.Pods != nil {
		ps = src.Pods()
	}
	s.Pods = pods(ps, snap.Ranked)
	return s
}

// signals lists every observed or thresholded signal, sorted by name, with
// each threshold as the eviction manager's last evaluation saw it.
func signals(obs map[pressure.Signal]pressure.Observation, ts []pressure.ThresholdState) []Signal {
	names := make([]pressure.Signal, 0, len(obs)+len(ts))
	for sig := range obs {
		names = append(names, sig)
	}
	for _, t := range ts {
		names = append(names, t.Threshold.Signal)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	out := make([]Signal, 0, len(names))
	for _, sig := range names {
		s := Signal{Signal: string(sig)}
		if o, observed := obs[sig]; observed {
			s.Observed, s.Value = o.String(), o.Value()
		}
		for _, st := range ts {
			t := st.Threshold
			if t.Signal != sig {
				continue
			}
			th := Threshold{Kind: "soft", Value: t.Value.String(), Limit: st.Limit, Crossed: st.Crossed,
				Acting: st.Acting, Pending: st.Pending, ByMinReclaim: st.ByMinReclaim}
			if t.Hard {
				th.Kind = "hard"
			}
			if t.GracePeriod > 0 {
				th.GracePeriod = t.GracePeriod.String()
			}
			if t.MinReclaim != nil {
				th.MinReclaim = t.MinReclaim.String()
			}
			if !st.Since.IsZero() {
				since := st.Since
				th.Since = &since
			}
			s.Thresholds = append(s.Thresholds, th)
		}
		out = append(out, s)
	}
	return out
}

// pods lists the evictable ready pods in the order of the eviction
// manager's last pass (ranked: its own ranking, with the stats it read),
// then the others. A ready pod that came after that pass is listed
// unranked, without stats, until the next one.
func pods(ps []*pod.Pod, ranked []evictor.RankedPod) []Pod {
	byKey := make(map[string]*pod.Pod, len(ps))
	for _, p := range ps {
		byKey[p.Key()] = p
	}
	out := make([]Pod, 0, len(ps))
	done := map[string]bool{}
	for _, r := range ranked {
		key := pod.Key(r.UID, r.Attempt)
		p, ok := byKey[key]
		if !ok || done[key] || !p.Evictable || p.State != pod.StateReady {
			continue // gone, or no longer a candidate, since that pass
		}
		done[key] = true
		out = append(out, podOf(p, r.Candidate, len(out)+1))
	}
	for _, p := range ps {
		if !done[p.Key()] {
			out = append(out, podOf(p, evictor.Candidate{}, 0))
		}
	}
	return out
}

func podOf(p *pod.Pod, c evictor.Candidate, rank int) Pod {
	return Pod{
		Rank: rank, Namespace: p.Namespace, Name: p.Name, UID: p.UID, Attempt: p.Attempt,
		QOS: string(p.QOS), Critical: p.Critical, Evictable: p.Evictable, Priority: p.Priority,
		State: string(p.State), SandboxID: p.SandboxID,
		HasStats: c.HasStats, WorkingSetBytes: c.WorkingSet, RequestBytes: c.Request,
	}
}
