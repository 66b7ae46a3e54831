package evictor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/cri-guard/cri-guard/pod"
	"github.com/cri-guard/cri-guard/pressure"
)

// Sampler reads node and pod stats (pressure.Sampler in production).
type Sampler interface {
	Node() (pressure.NodeSample, error)
	Pod(cgroupParent string) (pressure.PodStats, error)
}

// KillPodFunc stops every container of the pod with the grace period, then
// its sandbox, and returns once the sandbox is stopped or ctx ends (the
// kubelet's KillPodFunc).
type KillPodFunc func(ctx context.Context, p *pod.Pod, grace time.Duration) error

// StatsErrorPolicy says what admission does when pressure cannot be read.
type StatsErrorPolicy string

// The two policies of onStatsError.
const (
	// StatsErrorAdmit admits as if the node had no condition (fail open).
	StatsErrorAdmit StatsErrorPolicy = "admit"
	// StatsErrorReject treats unknown pressure as MemoryPressure (fail closed).
	StatsErrorReject StatsErrorPolicy = "reject"
)

// Config holds the manager's settings.
type Config struct {
	// Thresholds are the parsed eviction thresholds, hard and soft.
	Thresholds []pressure.Threshold
	// TransitionPeriod keeps MemoryPressure after the last threshold met.
	TransitionPeriod time.Duration
	// MaxPodGracePeriod is the grace period for soft-threshold evictions.
	MaxPodGracePeriod time.Duration
	// HardGracePeriod is the grace period for hard-threshold evictions.
	HardGracePeriod time.Duration
	// MaxSampleAge: an admission decision resamples when the last sample is older.
	MaxSampleAge time.Duration
	// OnStatsError chooses fail-open or fail-closed admission.
	OnStatsError StatsErrorPolicy
	// DryRun logs and counts evictions but stops nothing.
	DryRun bool
}

// Observer is told of every decision (metrics); may be nil.
type Observer interface {
	Decided(d Decision)
}

// Manager is the eviction manager. Admit and Synchronize must be called from
// one goroutine; Snapshot is safe from any.
type Manager struct {
	cfg     Config
	sampler Sampler
	kill    KillPodFunc
	now     func() time.Time
	log     *logrus.Entry
	obs     Observer
	eval    *pressure.Evaluator

	lastSample time.Time
	sample     pressure.NodeSample
	result     pressure.Result
	statsErr   error
	evicted    map[string]evictedPod // by pod UID
	unable     bool                  // the last pass found nothing to evict

	mu   sync.Mutex // guards snap
	snap Status
}

type evictedPod struct {
	pod     *pod.Pod
	message string
	at      time.Time
}

// Options are the manager's dependencies.
type Options struct {
	Sampler  Sampler
	Kill     KillPodFunc
	Now      func() time.Time
	Log      *logrus.Entry
	Observer Observer
}

// New builds a manager.
func New(cfg Config, o Options) (*Manager, error) {
	if o.Sampler == nil || o.Kill == nil {
		return nil, errors.New("new eviction manager: sampler and kill function are required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = logrus.NewEntry(logrus.StandardLogger())
	}
	if cfg.OnStatsError == "" {
		cfg.OnStatsError = StatsErrorAdmit
	}
	if cfg.MaxSampleAge <= 0 {
		cfg.MaxSampleAge = time.Second
	}
	return &Manager{
		cfg:     cfg,
		sampler: o.Sampler,
		kill:    o.Kill,
		now:     o.Now,
		log:     o.Log,
		obs:     o.Observer,
		eval:    pressure.NewEvaluator(cfg.Thresholds, cfg.TransitionPeriod),
		evicted: map[string]evictedPod{},
	}, nil
}

// SetThresholds replaces the thresholds (SIGHUP reload); the condition
// history starts again.
func (m *Manager) SetThresholds(ts []pressure.Threshold, transition time.Duration) {
	m.cfg.Thresholds = ts
	m.cfg.TransitionPeriod = transition
	m.eval = pressure.NewEvaluator(ts, transition)
}

// observe samples the node and evaluates the thresholds.
func (m *Manager) observe() {
	now := m.now()
	m.lastSample = now
	s, err := m.sampler.Node()
	if err != nil {
		if m.statsErr == nil {
			m.log.WithError(err).Warn("cannot read node memory stats")
		}
		m.statsErr = err
		m.decide(Decision{Time: now, Kind: KindStatsError, Message: err.Error()})
		return
	}
	if m.statsErr != nil {
		m.log.Info("node memory stats readable again")
	}
	m.statsErr = nil
	m.sample = s
	m.result = m.eval.Evaluate(now, s.Observations())
	if len(m.result.Conditions) == 0 && len(m.evicted) > 0 {
		m.log.WithField("pods", len(m.evicted)).Info("memory pressure is over: evicted pods may come back")
		clear(m.evicted)
	}
}

// conditions returns the node conditions admission uses, applying the
// onStatsError policy when stats could not be read.
func (m *Manager) conditions() (conds []string, statsErr bool) {
	if m.statsErr != nil {
		if m.cfg.OnStatsError == StatsErrorReject {
			return []string{ConditionMemoryPressure}, true
		}
		return nil, true
	}
	return m.result.Conditions, false
}

// Admit decides one pod sandbox (the eviction manager's Admit) with fresh
// stats: it resamples when the last sample is older than MaxSampleAge.
func (m *Manager) Admit(a *Attributes) Result {
	if m.now().Sub(m.lastSample) >= m.cfg.MaxSampleAge {
		m.observe()
		m.publish(nil)
	}
	conds, statsErr := m.conditions()
	r := admitUnderConditions(a.Pod, conds)
	if r.Admit && !a.Pod.Critical && len(conds) > 0 {
		if e, ok := m.evicted[a.Pod.UID]; ok {
			msg := e.message
			if msg == "" { // restored from a checkpoint: say what holds now
				msg = "The node was low on resource: memory. "
				if len(m.result.Met) > 0 {
					msg = evictionMessage(m.result.Met[0])
				}
			}
			r = Result{Reason: ReasonEvicted, Message: msg}
		}
	}
	if !r.Admit {
		if statsErr {
			r.Message += "Node memory stats could not be read and onStatsError is reject. "
		} else if met := m.result.Met; len(met) > 0 && r.Message == nodeConditionMessage(conds) {
			r.Message += fmt.Sprintf("Observed %s. ", met[0].String())
		}
	}
	kind := KindAdmit
	if !r.Admit {
		kind = KindRefuse
	}
	d := Decision{Time: m.now(), Kind: kind, Pod: podRef(a.Pod), Reason: r.Reason, Message: r.Message, Restored: a.Restored}
	if statsErr && m.cfg.OnStatsError == StatsErrorAdmit {
		d.Message = "admitted without stats (onStatsError: admit)"
	}
	m.decide(d)
	return r
}

// Synchronize is one pass of the eviction loop: sample, evaluate, and when a
// threshold is met stop the best-ranked evictable pod among active. It
// returns the pod it stopped (or would stop, in dry run), or nil.
func (m *Manager) Synchronize(ctx context.Context, active []*pod.Pod) (*pod.Pod, error) {
	m.observe()
	if m.statsErr != nil {
		m.publish(nil)
		return nil, fmt.Errorf("synchronize: %w", m.statsErr)
	}
	if len(m.result.Met) == 0 {
		m.unable = false
		m.publish(nil)
		return nil, nil
	}
	ranked := m.rank(active)
	m.publish(ranked)
	met := m.result.Met[0]
	now := m.now()
	if len(ranked) == 0 {
		// said once per episode: a pass every interval would flood the
		// log and push every other decision out of status
		if !m.unable {
			m.unable = true
			m.log.WithField("threshold", met.String()).Warn("unable to evict any pods from the node: no evictable pod")
			m.decide(Decision{Time: now, Kind: KindUnable, Signal: string(met.Threshold.Signal),
				Message: "unable to evict any pods from the node: every active pod is critical or none runs"})
		}
		return nil, nil
	}
	m.unable = false
	m.logCandidates(ranked, met)
	victim := ranked[0].Pod
	grace := m.cfg.MaxPodGracePeriod
	if met.Threshold.Hard {
		grace = m.cfg.HardGracePeriod
	}
	msg := evictionMessage(met)
	fields := logrus.Fields{"pod": victim.Name, "namespace": victim.Namespace, "pod_uid": victim.UID,
		"pod_sandbox_id": victim.SandboxID, "qos": victim.QOS, "signal": met.Threshold.Signal,
		"threshold": met.Threshold.String(), "observed": met.Observed.String()}
	if m.cfg.DryRun {
		m.log.WithFields(fields).Warn("dry run: would evict pod")
		m.decide(Decision{Time: now, Kind: KindDryRun, Pod: podRef(victim), Signal: string(met.Threshold.Signal), Reason: ReasonEvicted, Message: msg})
		return victim, nil
	}
	m.log.WithFields(fields).Warn("evicting pod")
	if err := m.kill(ctx, victim, grace); err != nil {
		m.decide(Decision{Time: m.now(), Kind: KindEvictFailed, Pod: podRef(victim), Signal: string(met.Threshold.Signal), Message: err.Error()})
		return nil, fmt.Errorf("evict pod %q: %w", victim.String(), err)
	}
	m.evicted[victim.UID] = evictedPod{pod: victim, message: msg, at: m.now()}
	m.decide(Decision{Time: m.now(), Kind: KindEvict, Pod: podRef(victim), Signal: string(met.Threshold.Signal), Reason: ReasonEvicted, Message: msg})
	return victim, nil
}

// evictionMessage is the kubelet's message for an evicted pod.
func evictionMessage(met pressure.Met) string {
	if met.Threshold.Signal.IsPSI() {
		return fmt.Sprintf("The node was low on resource: memory. Threshold quantity: %s > %s, observed: %s. ",
			met.Threshold.Signal, met.Threshold.Value.String(), met.Observed.String())
	}
	return fmt.Sprintf("The node was low on resource: memory. Threshold quantity: %s, available: %s. ",
		met.Threshold.Value.String(), met.Observed.String())
}

func (m *Manager) logCandidates(ranked []Candidate, met pressure.Met) {
	n := min(len(ranked), 5)
	for i, c := range ranked[:n] {
		m.log.WithFields(logrus.Fields{"rank": i + 1, "pod": c.Pod.Name, "namespace": c.Pod.Namespace,
			"qos": c.Pod.QOS, "priority": c.Pod.Priority, "has_stats": c.HasStats,
			"working_set": c.WorkingSet, "request": c.Request, "signal": met.Threshold.Signal}).Info("eviction candidate")
	}
}

// MarkEvicted restores the re-admission guard for a pod cri-guard evicted
// before a restart (its checkpoint says so): while memory pressure lasts,
// its recreation is refused. The first sample without pressure forgets it.
func (m *Manager) MarkEvicted(p *pod.Pod, at time.Time) {
	if _, ok := m.evicted[p.UID]; !ok {
		m.evicted[p.UID] = evictedPod{pod: p, at: at}
	}
}

// IsEvicted reports whether cri-guard evicted the pod with this UID and the
// pressure that caused it has not ended yet.
func (m *Manager) IsEvicted(uid string) bool {
	_, ok := m.evicted[uid]
	return ok
}
