package evictor

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/pressure"
)

// Sampler reads node and pod stats (pressure.Sampler in production).
type Sampler interface {
	Node() (pressure.NodeSample, error)
	Pod(cgroupParent string) (pressure.PodStats, error)
}

// StatsErrorPolicy says what admission does when pressure cannot be read.
type StatsErrorPolicy string

// The two policies of onStatsError.
const (
	// statsErrorAdmit admits as if the node had no condition (fail open).
	statsErrorAdmit StatsErrorPolicy = "admit"
	// statsErrorReject treats unknown pressure as MemoryPressure (fail closed).
	statsErrorReject StatsErrorPolicy = "reject"
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
	// OnStatsError chooses fail-open or fail-closed admission.
	OnStatsError StatsErrorPolicy
	// DryRun logs and counts evictions but stops nothing.
	DryRun bool
}

// Observer is told of every decision (metrics); may be nil.
type Observer interface {
	Decided(d Decision)
}

// Manager is the eviction manager. Its methods but Snapshot must be called
// from one goroutine (the sync loop's); Snapshot is safe from any.
type Manager struct {
	cfg     Config
	sampler Sampler
	now     func() time.Time
	log     *logrus.Entry
	obs     Observer
	onPress func(Pressure)
	eval    *pressure.Evaluator

	lastSample time.Time
	sample     pressure.NodeSample
	// observed is sample's observations, made once per sample and never
	// changed after: the evaluation, Evaluation and the status snapshot
	// share it.
	observed map[pressure.Signal]pressure.Observation
	fall     fallRates // how fast each memory signal falls
	result   pressure.Result
	statsErr error
	evicted  map[string]evictedPod // by pod UID
	missing  []string              // threshold signals the last sample lacked
	unable   bool                  // the last pass found nothing to evict
	told     *Pressure             // the view last given to onPress

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
	Now      func() time.Time
	Log      *logrus.Entry
	Observer Observer
	// OnPressure is told of every change of the manager's view of memory
	// pressure (the API's node condition and taint follow it); may be nil.
	// It is called on the caller's goroutine (the sync loop's) and must
	// not block.
	OnPressure func(Pressure)
}

// Pressure is the manager's view of memory pressure, as admission acts on
// it.
type Pressure struct {
	// MemoryPressure: the MemoryPressure condition holds (a threshold met,
	// or met within the transition period; or the onStatsError policy).
	MemoryPressure bool
	// Thresholds are the thresholds met or within their grace period,
	// without observed values: stable while the pressure lasts.
	Thresholds []string
}

// New builds a manager.
func New(cfg Config, o Options) (*Manager, error) {
	if o.Sampler == nil {
		return nil, errors.New("new eviction manager: a sampler is required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = logrus.NewEntry(logrus.StandardLogger())
	}
	if cfg.OnStatsError == "" {
		cfg.OnStatsError = statsErrorAdmit
	}
	return &Manager{
		cfg:     cfg,
		sampler: o.Sampler,
		now:     o.Now,
		log:     o.Log,
		obs:     o.Observer,
		onPress: o.OnPressure,
		eval:    pressure.NewEvaluator(cfg.Thresholds, cfg.TransitionPeriod),
		evicted: map[string]evictedPod{},
	}, nil
}

// SetThresholds replaces the thresholds (SIGHUP reload) and evaluates them
// at once. What was observed is kept for the thresholds that did not
// change, and the condition's history too (pressure.Evaluator.Update): a
// reload never drops MemoryPressure early nor restarts a grace period. It
// returns the thresholds added and removed.
func (m *Manager) SetThresholds(ts []pressure.Threshold, transition time.Duration) (added, removed []string) {
	m.cfg.Thresholds = ts
	m.cfg.TransitionPeriod = transition
	added, removed = m.eval.Update(ts, transition)
	m.Observe()
	return added, removed
}

// Observe samples the node and evaluates the thresholds, the first step of
// Synchronize without deciding anything: the sync loop calls it before
// restored pods are admitted, and for the fast poll's watch samples far
// from every threshold, so that Admit reads a current evaluation.
func (m *Manager) Observe() {
	m.observe()
	m.publish(nil)
}

// observe samples the node and evaluates the thresholds.
func (m *Manager) observe() {
	now := m.now()
	s, err := m.sampler.Node()
	if err != nil {
		// the last good sample stays as it was (its time too): status and
		// metrics show it as stale, not as current
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
	m.lastSample = now
	// the last pool read stands while the pool cannot be read: said once
	// when that starts and once when it ends
	switch {
	case s.HugePagesError != nil && m.sample.HugePagesError == nil:
		m.log.WithError(s.HugePagesError).WithField("observed", s.HugePagesBytes).Warn("cannot read the huge page pool: the last one read stands")
	case s.HugePagesError == nil && m.sample.HugePagesError != nil:
		m.log.WithField("observed", s.HugePagesBytes).Info("huge page pool readable again")
	}
	m.sample = s
	obs := s.Observations()
	m.observed = obs
	m.fall.observe(now, obs)
	m.result = m.eval.Evaluate(now, obs)
	m.noteMissing(obs)
	if len(m.result.Conditions) == 0 && len(m.evicted) > 0 {
		m.log.WithField("pods", len(m.evicted)).Info("memory pressure is over: evicted pods may come back")
		clear(m.evicted)
	}
}

// noteMissing logs, when it changes, which thresholds' signals the sample
// lacks (a PSI file gone or broken, a pods cgroup unreadable): such a
// threshold cannot act, and that must not pass in silence.
func (m *Manager) noteMissing(obs map[pressure.Signal]pressure.Observation) {
	var missing []string
	for _, t := range m.cfg.Thresholds {
		if _, ok := obs[t.Signal]; !ok && !slices.Contains(missing, string(t.Signal)) {
			missing = append(missing, string(t.Signal))
		}
	}
	if slices.Equal(missing, m.missing) {
		return
	}
	m.missing = missing
	f := logrus.Fields{"signals": missing}
	if m.sample.PSIError != nil {
		f["psi_error"] = m.sample.PSIError.Error()
	}
	if m.sample.PodsError != nil {
		f["pods_error"] = m.sample.PodsError.Error()
	}
	if len(missing) == 0 {
		m.log.Info("every threshold's signal is observed again")
		return
	}
	m.log.WithFields(f).Warn("thresholds on signals missing from the sample cannot act")
}

// conditions returns the node conditions admission uses, applying the
// onStatsError policy when stats could not be read.
func (m *Manager) conditions() (conds []string, statsErr bool) {
	if m.statsErr != nil {
		if m.cfg.OnStatsError == statsErrorReject {
			return []string{pressure.ConditionMemoryPressure}, true
		}
		return nil, true
	}
	return m.result.Conditions, false
}

// Admit decides one pod sandbox (the eviction manager's Admit). It is a
// read: it uses the conditions of the last evaluation, as the kubelet's
// Admit reads its cached conditions, and neither samples nor moves a
// grace timer; only Synchronize does. It records the decision.
func (m *Manager) Admit(a *Attributes) Result {
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
	if statsErr && m.cfg.OnStatsError == statsErrorAdmit {
		d.Message = "admitted without stats (onStatsError: admit)"
	}
	m.decide(d)
	return r
}
