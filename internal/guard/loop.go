package guard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/checkpoint"
	"github.com/cri-guard/cri-guard/internal/evictor"
	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/pressure"
)

// Runtime is what the loop needs of containerd (runtimeproxy.Client).
type Runtime interface {
	ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	PodSandboxStatus(ctx context.Context, id string) (*runtimeapi.PodSandboxStatusResponse, error)
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	ListContainerStats(ctx context.Context, filter *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error)
	StopContainer(ctx context.Context, id string, timeoutSeconds int64) error
	StopPodSandbox(ctx context.Context, id string) error
}

// Store keeps the checkpoints (checkpoint.Store).
type Store interface {
	Put(r checkpoint.Record) error
	List() ([]checkpoint.Record, error)
	Delete(key string) error
}

// Evictor makes the decisions (evictor.Manager); the loop acts on them and
// reports the outcome of each eviction.
type Evictor interface {
	Admit(a *evictor.Attributes) evictor.Result
	// Observe samples the node and evaluates the thresholds, deciding
	// nothing (before restored pods are admitted; the fast poll's watch).
	Observe()
	// Synchronize is one eviction pass: one sample, one Action for the
	// loop to carry out.
	Synchronize(p evictor.Pass) evictor.Action
	Evicted(e *evictor.Eviction)
	EvictionFailed(e *evictor.Eviction, err error)
	// MarkEvicted restores the re-admission guard of a pod evicted before
	// a restart.
	MarkEvicted(p *pod.Pod, at time.Time)
	// SetThresholds replaces the thresholds (a reload).
	SetThresholds(ts []pressure.Threshold, transition time.Duration) (added, removed []string)
	// Evaluation is what the last sample said: how near a threshold the
	// node is (the fast poll) and the sample itself (the kernel
	// notifiers' levels).
	Evaluation() evictor.Evaluation
	// EvictRestored is the eviction of a restored pod Admit refused at
	// start-up (nil in dry run).
	EvictRestored(p *pod.Pod, r evictor.Result) *evictor.Eviction
}

var _ Evictor = (*evictor.Manager)(nil)

// PodStats reads an eviction's victim in its pod cgroup (pressure.Bounded
// in production, the cgroup reads bounded in time): the loop reads the
// victim's working set to see it release its memory. It is not a
// decision, so it does not go through the evictor.
type PodStats interface {
	// Pod reads a pod cgroup's stats now (one file for the working set).
	Pod(cgroupParent string) (pressure.PodStats, error)
}

// Killer reaches an eviction's victim past the runtime, in its pod cgroup
// (podkill.Bounded in production, the kill bounded in time): the loop
// kills its processes at once when its grace period is cut. It is not a
// decision, so it does not go through the evictor.
type Killer interface {
	// KillPod kills a pod cgroup's processes with SIGKILL; it returns how
	// many were signalled, -1 when the kernel killed the cgroup without
	// saying. It refuses a group outside the pods cgroup.
	KillPod(cgroupParent string) (int, error)
}

var (
	_ PodStats = (*pressure.Bounded)(nil)
	_ PodStats = (*pressure.Sampler)(nil)
)

// APIPods is what the API server says of pods (kube.Client.Pod): read from
// a cache, never blocking.
type APIPods interface {
	Pod(uid string) (pod.API, bool)
}

// Reporter tells the control plane of decisions (kube.Client): it queues,
// never blocks.
type Reporter interface {
	Rejected(p *pod.Pod, reason, message string)
	Evicted(p *pod.Pod, message string)
}

// Config holds the loop's settings.
type Config struct {
	// HousekeepingInterval is how often Synchronize runs without a trigger.
	HousekeepingInterval time.Duration
	// EnforceRestored stops restored pods that admission refuses; when
	// false they are only logged (restoredPods: warn).
	EnforceRestored bool
	// Rules derives critical flags for adopted sandboxes.
	Rules pod.CriticalRules
	// StopTimeout bounds one eviction (grace period plus this): a stop that
	// takes longer counts as failed.
	StopTimeout time.Duration
	// AfterRuntimeTimeout bounds how long a CRI call waits for the loop to
	// record the runtime's answer (default 10 s); the answer is recorded
	// however late.
	AfterRuntimeTimeout time.Duration
	// FastPoll polls fast near a threshold (fastpath.go); zero: off.
	FastPoll FastPoll
	// Wakeups are the kernel's wake-ups (wakeups.go): the loop arms them
	// when it runs and re-arms them on a reload; zero: none.
	Wakeups Wakeups
	// WatchdogInterval is the longest the loop goes without calling
	// Options.Watchdog (besides after every housekeeping pass): a
	// housekeeping interval longer than systemd's WatchdogSec must not get
	// a healthy loop killed. Zero: after housekeeping passes only.
	WatchdogInterval time.Duration
}

// Options are the loop's dependencies.
type Options struct {
	Runtime Runtime
	Store   Store
	Evictor Evictor
	// PodStats reads evictions' victims' working sets; nil: none is
	// known (only the containers' stops say a victim released its memory).
	PodStats PodStats
	// Killer kills evictions' victims past the runtime; nil: only the
	// runtime stops them (no grace cut kills directly).
	Killer Killer
	Log    *logrus.Entry
	Now    func() time.Time
	// Watchdog is called after every housekeeping pass and every
	// Config.WatchdogInterval, from the loop goroutine (sd_notify WATCHDOG).
	Watchdog func()
	// API and Reporter connect the loop to the API server; both nil:
	// CRI only.
	API      APIPods
	Reporter Reporter
}

// Loop is the sync loop.
type Loop struct {
	cfg     Config
	rt      Runtime
	store   Store
	ev      Evictor
	stats   PodStats
	kill    Killer
	log     *logrus.Entry
	now     func() time.Time
	wdog    func()
	api     APIPods
	report  Reporter
	updates chan func()

	degraded atomic.Pointer[error] // why the loop serves without a finished restore

	saves saves // the records' writes, their outcomes and retries

	// owned by the loop goroutine
	pods       map[string]*pod.Pod  // by pod key
	evictions  evictions            // what the loop carries out of the evictor's decisions
	lastResync time.Time            // when housekeeping last started a listing of the runtime's sandboxes
	listing    bool                 // the listing housekeeping started is under way (resync)
	gen        uint64               // the generation of the last outcome recorded (touch)
	changed    map[string]uint64    // pod keys: the generation of the last outcome recorded of their sandbox
	unsettled  map[string]time.Time // pending records no call will settle: when a listing without their sandbox drops them
	// restoreDrops: while a retried restore reads (RetryRestore), the
	// records dropped since it started; nil otherwise
	restoreDrops map[string]bool
	calls        map[string]int // pod keys: the RunPodSandbox calls in flight that admitted a pending record
	wake         wakeups        // every wake-up of the loop but its queue
	closeOnce    sync.Once
	done         chan struct{}

	mu   sync.Mutex // guards view
	view []*pod.Pod
}

// New builds a loop; call Restore, then Run.
func New(cfg Config, o Options) (*Loop, error) {
	if o.Runtime == nil || o.Store == nil || o.Evictor == nil {
		return nil, errors.New("new sync loop: runtime, store and evictor are required")
	}
	if cfg.HousekeepingInterval <= 0 {
		return nil, errors.New("new sync loop: housekeeping interval must be positive")
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = 30 * time.Second
	}
	if cfg.AfterRuntimeTimeout <= 0 {
		cfg.AfterRuntimeTimeout = defaultAfterRuntimeTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = logrus.NewEntry(logrus.StandardLogger())
	}
	return &Loop{
		cfg: cfg, rt: o.Runtime, store: o.Store, ev: o.Evictor, stats: o.PodStats, kill: o.Killer, log: o.Log, now: o.Now, wdog: o.Watchdog,
		api: o.API, report: o.Reporter,
		evictions: evictions{bound: newRateBound()},
		updates:   make(chan func()),
		wake:      wakeups{fired: make(chan struct{}, 1)},
		saves:     newSaves(o.Store),
		pods:      map[string]*pod.Pod{},
		changed:   map[string]uint64{},
		unsettled: map[string]time.Time{},
		calls:     map[string]int{},
		done:      make(chan struct{}),
	}, nil
}

// doEventually runs f on the loop like do, but f is never dropped: an
// outcome that happened (a sandbox created, stopped, removed) must be
// recorded however busy the loop is. When ctx ends before the loop took f,
// f is handed over in the background and runs as soon as the loop is free
// (seen in a slow guest: a loop busy for over 10 s left a created sandbox's
// pod pending for good, unranked, never evicted); the error says so.
func (l *Loop) doEventually(ctx context.Context, f func()) error {
	finished := make(chan struct{})
	g := func() { f(); close(finished) }
	select {
	case l.updates <- g:
	case <-l.done:
		return errStopped
	case <-ctx.Done():
		go func() {
			select {
			case l.updates <- g:
			case <-l.done:
			}
		}()
		return fmt.Errorf("sync loop busy, recorded once it is free: %w", ctx.Err())
	}
	select {
	case <-finished:
		return nil
	case <-l.done:
		return errStopped
	}
}

// errStopped is returned by calls made after the loop has stopped.
var errStopped = errors.New("sync loop stopped")

// do runs f on the loop goroutine and waits for it.
func (l *Loop) do(ctx context.Context, f func()) error {
	finished := make(chan struct{})
	select {
	case l.updates <- func() { f(); close(finished) }:
	case <-l.done:
		return errStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-finished:
		return nil
	case <-l.done:
		return errStopped
	}
}

// Trigger asks for a housekeeping pass now (a PSI trigger fired). It never blocks.
func (l *Loop) Trigger() { l.wake.fire(passTrigger) }

// Run is the loop: it returns when ctx ends.
func (l *Loop) Run(ctx context.Context) error {
	defer l.closeOnce.Do(func() { close(l.done) })
	wctx, stopWakeups := context.WithCancel(ctx)
	defer func() { stopWakeups(); l.wake.wg.Wait() }()
	l.startWakeups(wctx)
	tick := time.NewTicker(l.cfg.HousekeepingInterval)
	defer tick.Stop()
	// After a PSI trigger the stall has only begun (a trigger fires at most
	// once per window): follow up with quick passes, whose samples advance
	// the PSI averages from the stall time since the last one, so a
	// threshold is acted on as soon as the averages cross it, not at the
	// next trigger or tick.
	burst := time.NewTimer(time.Hour)
	burst.Stop()
	defer burst.Stop()
	burstLeft := 0
	fp := newFastPoller(l.cfg.FastPoll, l.ev, l.nearCovered, l.cfg.HousekeepingInterval)
	l.wake.fp = fp
	defer fp.stop()
	fp.schedule(passManual, fp.isNear()) // restore's sample
	refused := time.NewTimer(time.Hour)
	defer refused.Stop()
	var watchdog <-chan time.Time
	if l.cfg.WatchdogInterval > 0 && l.wdog != nil {
		t := time.NewTicker(l.cfg.WatchdogInterval)
		defer t.Stop()
		watchdog = t.C
	}
	for {
		l.armRefused(refused)
		select {
		case <-ctx.Done():
			return nil
		case f := <-l.updates:
			f()
		case <-l.saves.w.Ready():
			l.recordWrites()
		case <-tick.C:
			near := l.housekeeping(ctx, passTick)
			l.afterTick()
			fp.schedule(passTick, near)
		case <-l.wake.fired:
			// the kernel's: a PSI trigger, a memory threshold's level
			// crossed, the pods cgroup's memory.events (memory.high or
			// memory.max met, an OOM); a pass for each that fired
			for _, why := range l.wake.take() {
				near := l.housekeeping(ctx, why)
				if why == passTrigger {
					// only a trigger's stall has follow-ups: near a
					// threshold the fast poll takes over
					burstLeft = psiFollowUps
					burst.Reset(psiFollowUpInterval)
				}
				fp.schedule(why, near)
			}
		case <-burst.C:
			near := l.housekeeping(ctx, passFollowUp)
			if burstLeft--; burstLeft > 0 {
				burst.Reset(psiFollowUpInterval)
			}
			fp.schedule(passFollowUp, near)
		case <-fp.c():
			fp.schedule(passFastPoll, l.fastPass(ctx, fp))
		case <-refused.C:
			l.housekeeping(ctx, passRefused)
		case <-watchdog:
			l.wdog() // the loop takes its turns: alive
		}
	}
}

// applyAPI completes the known pods with what the API says of them
// (priority, requests, grace period, tolerations may arrive after the
// sandbox): a cache read per pod (loop goroutine).
func (l *Loop) applyAPI() {
	if l.api == nil {
		return
	}
	for _, p := range l.pods {
		if a, ok := l.api.Pod(p.UID); ok {
			l.cfg.Rules.ApplyAPI(p, a)
		}
	}
}

// active returns the ready pods, oldest first.
func (l *Loop) active() []*pod.Pod {
	out := make([]*pod.Pod, 0, len(l.pods))
	for _, p := range l.pods {
		if p.State == pod.StateReady {
			out = append(out, p)
		}
	}
	sortByCreated(out)
	return out
}

func sortByCreated(ps []*pod.Pod) {
	slices.SortStableFunc(ps, func(a, b *pod.Pod) int { return a.Created.Compare(b.Created) })
}

// publish refreshes the readers' view; called on the loop goroutine after changes.
func (l *Loop) publish() {
	v := make([]*pod.Pod, 0, len(l.pods))
	for _, p := range l.pods {
		v = append(v, p.Clone())
	}
	sortByCreated(v)
	l.mu.Lock()
	l.view = v
	l.mu.Unlock()
}

// Pods returns a snapshot of the pods the loop knows, oldest first.
func (l *Loop) Pods() []*pod.Pod {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.view
}

// bySandbox finds a pod by its sandbox id, or by a unique prefix of it as
// containerd accepts (crictl sends truncated ids) (loop goroutine only).
func (l *Loop) bySandbox(id string) *pod.Pod {
	if id == "" {
		return nil
	}
	var found *pod.Pod
	for _, p := range l.pods {
		switch {
		case p.SandboxID == id:
			return p
		case strings.HasPrefix(p.SandboxID, id):
			if found != nil {
				return nil // ambiguous: containerd refuses it too
			}
			found = p
		}
	}
	return found
}

func podFields(p *pod.Pod) logrus.Fields {
	f := logrus.Fields{"pod": p.Name, "namespace": p.Namespace, "pod_uid": p.UID, "qos": p.QOS}
	if p.SandboxID != "" {
		f["pod_sandbox_id"] = p.SandboxID
	}
	if p.Attempt > 0 {
		f["attempt"] = p.Attempt
	}
	return f
}
