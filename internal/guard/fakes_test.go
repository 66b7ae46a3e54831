package guard

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/checkpoint"
	"github.com/cri-guard/cri-guard/internal/evictor"
	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/pressure"
	"github.com/cri-guard/cri-guard/internal/testutil"
)

// fakeRuntime is an in-memory runtime: sandboxes and their containers.
type fakeRuntime struct {
	mu        sync.Mutex
	sandboxes map[string]*runtimeapi.PodSandbox
	statuses  map[string]*runtimeapi.PodSandboxStatusResponse
	ctrs      map[string]*runtimeapi.Container
	calls     []string
	listErr   error
	lists     int // ListPodSandbox calls
	// listHold, when set, makes ListPodSandbox wait for it to be closed
	// (or ctx) after it took its picture of the sandboxes, as a runtime
	// slow to answer; listTaken is told of each picture taken, listsHeld
	// counts the lists waiting.
	listHold  chan struct{}
	listTaken chan struct{}
	listsHeld int
	// statusHold, when set, makes PodSandboxStatus wait for it to be
	// closed (or ctx), statusTaken told of each call held.
	statusHold  chan struct{}
	statusTaken chan struct{}
	// stopErrs are returned by the next StopPodSandbox calls, one each;
	// stopHang, when set, makes StopPodSandbox wait for it or ctx.
	stopErrs []error
	stopHang chan struct{}
	// ctrHang, when set, makes StopContainer wait for it or ctx (a
	// container that ignores SIGTERM for its grace period).
	ctrHang chan struct{}
	usage   map[string]uint64 // container working sets, by id
	// onStop, when set before the loop runs, is called (under mu) as each
	// StopPodSandbox arrives, before anything else (slowdisk_bench_test.go
	// times the evictions by it).
	onStop func(id string)
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{sandboxes: map[string]*runtimeapi.PodSandbox{}, statuses: map[string]*runtimeapi.PodSandboxStatusResponse{}, ctrs: map[string]*runtimeapi.Container{}}
}

func (f *fakeRuntime) addSandbox(id, uid string, attempt uint32, ready bool, created time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	if ready {
		st = runtimeapi.PodSandboxState_SANDBOX_READY
	}
	md := &runtimeapi.PodSandboxMetadata{Name: "n-" + uid, Namespace: "default", Uid: uid, Attempt: attempt}
	f.sandboxes[id] = &runtimeapi.PodSandbox{Id: id, Metadata: md, State: st, CreatedAt: created.UnixNano()}
	f.statuses[id] = &runtimeapi.PodSandboxStatusResponse{Status: &runtimeapi.PodSandboxStatus{Id: id, Metadata: md, State: st, CreatedAt: created.UnixNano(),
		Annotations: map[string]string{}, Linux: &runtimeapi.LinuxPodSandboxStatus{}}}
	f.ctrs["c-"+id] = &runtimeapi.Container{Id: "c-" + id, PodSandboxId: id, State: runtimeapi.ContainerState_CONTAINER_RUNNING}
}

// kubeletCgroup gives sandbox id the verbose info containerd answers with
// its config: the cgroup parent the kubelet gives a BestEffort pod, which
// a kill past the runtime requires (pod.IsOwnCgroup).
func (f *fakeRuntime) kubeletCgroup(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.statuses[id]
	st.Info = map[string]string{pod.InfoKey: fmt.Sprintf(`{"config":{"linux":{"cgroup_parent":"/kubepods/besteffort/pod%s"}}}`, st.Status.Metadata.Uid)}
}

func (f *fakeRuntime) record(s string) { f.calls = append(f.calls, s) }

// ListPodSandbox answers with copies, as a client decodes its own: the
// picture of the moment it was taken.
func (f *fakeRuntime) ListPodSandbox(ctx context.Context, _ *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	f.mu.Lock()
	f.lists++
	if f.listErr != nil {
		f.mu.Unlock()
		return nil, f.listErr
	}
	var out []*runtimeapi.PodSandbox
	for _, s := range f.sandboxes {
		out = append(out, &runtimeapi.PodSandbox{Id: s.Id, Metadata: s.Metadata, State: s.State, CreatedAt: s.CreatedAt})
	}
	hold, taken := f.listHold, f.listTaken
	if hold != nil {
		f.listsHeld++
	}
	f.mu.Unlock()
	if hold == nil {
		return out, nil
	}
	if taken != nil {
		taken <- struct{}{}
	}
	defer func() {
		f.mu.Lock()
		f.listsHeld--
		f.mu.Unlock()
	}()
	select {
	case <-hold:
		return out, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// holdLists makes every ListPodSandbox from now on wait, after taking its
// picture, until release is called (once or more); taken receives once per
// picture taken.
func (f *fakeRuntime) holdLists() (taken <-chan struct{}, release func()) {
	hold, tk := make(chan struct{}), make(chan struct{}, 16)
	f.mu.Lock()
	f.listHold, f.listTaken = hold, tk
	f.mu.Unlock()
	var once sync.Once
	return tk, func() {
		once.Do(func() {
			f.mu.Lock()
			f.listHold, f.listTaken = nil, nil
			f.mu.Unlock()
			close(hold)
		})
	}
}

// held is the number of ListPodSandbox calls waiting on holdLists.
func (f *fakeRuntime) held() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.listsHeld
}

// holdStatuses makes every PodSandboxStatus from now on wait until
// release is called (once or more); taken receives once per call held.
func (f *fakeRuntime) holdStatuses() (taken <-chan struct{}, release func()) {
	hold, tk := make(chan struct{}), make(chan struct{}, 16)
	f.mu.Lock()
	f.statusHold, f.statusTaken = hold, tk
	f.mu.Unlock()
	var once sync.Once
	return tk, func() {
		once.Do(func() {
			f.mu.Lock()
			f.statusHold, f.statusTaken = nil, nil
			f.mu.Unlock()
			close(hold)
		})
	}
}

func (f *fakeRuntime) PodSandboxStatus(ctx context.Context, id string) (*runtimeapi.PodSandboxStatusResponse, error) {
	f.mu.Lock()
	hold, taken := f.statusHold, f.statusTaken
	f.mu.Unlock()
	if hold != nil {
		select {
		case taken <- struct{}{}:
		default:
		}
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.statuses[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "sandbox %q not found", id)
	}
	return st, nil
}

func (f *fakeRuntime) ListContainers(_ context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*runtimeapi.Container
	for _, c := range f.ctrs {
		if filter == nil || filter.PodSandboxId == "" || c.PodSandboxId == filter.PodSandboxId {
			// a copy, as a real runtime's answer is: StopContainer
			// changes the fake's own
			out = append(out, proto.Clone(c).(*runtimeapi.Container))
		}
	}
	return out, nil
}

func (f *fakeRuntime) ListContainerStats(_ context.Context, filter *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*runtimeapi.ContainerStats
	for _, c := range f.ctrs {
		if filter != nil && filter.PodSandboxId != "" && c.PodSandboxId != filter.PodSandboxId {
			continue
		}
		name := c.GetMetadata().GetName()
		if name == "" {
			name = "main"
		}
		out = append(out, &runtimeapi.ContainerStats{Attributes: &runtimeapi.ContainerAttributes{Id: c.Id, Metadata: &runtimeapi.ContainerMetadata{Name: name}},
			Memory: &runtimeapi.MemoryUsage{WorkingSetBytes: &runtimeapi.UInt64Value{Value: f.usage[c.Id]}}})
	}
	return out, nil
}

func (f *fakeRuntime) StopContainer(ctx context.Context, id string, timeout int64) error {
	f.mu.Lock()
	f.record(fmt.Sprintf("StopContainer %s %d", id, timeout))
	hang := f.ctrHang
	f.mu.Unlock()
	if hang != nil {
		select {
		case <-hang:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.ctrs[id]; ok {
		c.State = runtimeapi.ContainerState_CONTAINER_EXITED
	}
	return nil
}

func (f *fakeRuntime) StopPodSandbox(ctx context.Context, id string) error {
	f.mu.Lock()
	if f.onStop != nil {
		f.onStop(id)
	}
	hang := f.stopHang
	f.mu.Unlock()
	if hang != nil {
		select {
		case <-hang:
		case <-ctx.Done():
			f.mu.Lock()
			f.record("StopPodSandbox " + id + " timed out")
			f.mu.Unlock()
			return status.FromContextError(ctx.Err()).Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.stopErrs) > 0 {
		err := f.stopErrs[0]
		f.stopErrs = f.stopErrs[1:]
		f.record("StopPodSandbox " + id + " failed")
		return err
	}
	f.record("StopPodSandbox " + id)
	if s, ok := f.sandboxes[id]; ok {
		s.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	}
	return nil
}

func (f *fakeRuntime) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// memStore is an in-memory checkpoint store.
type memStore struct {
	mu   sync.Mutex
	recs map[string]checkpoint.Record
	err  error
	// slow, when set, holds every Put and Delete until it is closed (a
	// state disk whose fsync takes seconds)
	slow chan struct{}
	puts []checkpoint.Record // every Put, in order
	// attempts counts every Put, failed or not
	attempts int
}

// hold makes every Put and Delete wait until the returned func is called
// (once or more).
func (s *memStore) hold() (release func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.slow = ch
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.slow = nil
			s.mu.Unlock()
			close(ch)
		})
	}
}

func (s *memStore) wait() {
	s.mu.Lock()
	ch := s.slow
	s.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

func newMemStore() *memStore { return &memStore{recs: map[string]checkpoint.Record{}} }

func (s *memStore) Put(r checkpoint.Record) error {
	s.wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts++
	if s.err != nil {
		return s.err
	}
	s.recs[r.Pod.Key()] = r
	s.puts = append(s.puts, r)
	return nil
}

func (s *memStore) List() ([]checkpoint.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []checkpoint.Record
	for _, r := range s.recs {
		out = append(out, r)
	}
	return out, nil
}

func (s *memStore) Delete(key string) error {
	s.wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.recs, key)
	return nil
}

func (s *memStore) get(key string) (checkpoint.Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[key]
	return r, ok
}

// ruleEvictor refuses BestEffort non-critical pods while pressure is set and
// chooses the first evictable active pod on Synchronize.
type ruleEvictor struct {
	pressure atomic.Bool
	admits   int
	syncs    int
	marked   []string            // MarkEvicted calls, by UID
	evicted  []string            // Evicted calls, by UID
	failed   []string            // EvictionFailed calls, by UID
	sample   pressure.NodeSample // the last sample Evaluation says (set before Run)
}

func (e *ruleEvictor) Admit(a *evictor.Attributes) evictor.Result {
	e.admits++
	if e.pressure.Load() && !a.Pod.Critical && a.Pod.QOS == pod.BestEffort {
		return evictor.Result{Reason: "Evicted", Message: "The node had condition: [MemoryPressure]. "}
	}
	return evictor.Result{Admit: true}
}

func (e *ruleEvictor) Observe() {}

// Evaluation is never near a threshold: the fast paths stay off.
func (e *ruleEvictor) Evaluation() evictor.Evaluation { return evictor.Evaluation{Sample: e.sample} }

func (e *ruleEvictor) EvictRestored(p *pod.Pod, r evictor.Result) *evictor.Eviction {
	return &evictor.Eviction{Pod: p, Grace: evictor.DefaultTerminationGracePeriod, Message: r.Message, Restored: true}
}

// SetThresholds says every threshold is new.
func (e *ruleEvictor) SetThresholds(ts []pressure.Threshold, _ time.Duration) (added, removed []string) {
	for _, t := range ts {
		added = append(added, t.String())
	}
	return added, nil
}

func (e *ruleEvictor) MarkEvicted(p *pod.Pod, _ time.Time) { e.marked = append(e.marked, p.UID) }

// Synchronize decides as the real evictor on a node whose evaluation never
// meets a memory threshold: the next eviction waits for the one under way
// (no overlap), for the rate bound, for the restored pods refused at
// start-up (evictor.EvictionSpacing apart) and, on a quick pass, for
// evictor.EvictionSpacing after the last; then, while pressure is set, it
// chooses the first evictable active pod (syncs counts these choices).
func (e *ruleEvictor) Synchronize(p evictor.Pass) evictor.Action {
	switch {
	case len(p.InFlight) > 0:
		return evictor.Action{Hold: evictor.HoldInFlight}
	case p.RateHeld:
		return evictor.Action{Hold: evictor.HoldRate}
	case p.Refused != nil:
		a := evictor.Action{Hold: evictor.HoldRefused}
		if p.SinceSettled >= evictor.EvictionSpacing {
			a.Evict = p.Refused
		}
		return a
	case p.Spaced && p.SinceSettled < evictor.EvictionSpacing:
		return evictor.Action{Hold: evictor.HoldSpacing}
	}
	e.syncs++
	if !e.pressure.Load() {
		return evictor.Action{}
	}
	for _, pd := range p.Active {
		if pd.Evictable {
			return evictor.Action{Evict: &evictor.Eviction{Pod: pd, Grace: time.Second, Signal: "memory.available", Wakeup: p.Wakeup}}
		}
	}
	return evictor.Action{}
}

func (e *ruleEvictor) Evicted(ev *evictor.Eviction) { e.evicted = append(e.evicted, ev.Pod.UID) }

func (e *ruleEvictor) EvictionFailed(ev *evictor.Eviction, _ error) {
	e.failed = append(e.failed, ev.Pod.UID)
}

func testLog() *logrus.Entry {
	l := logrus.New()
	l.SetLevel(logrus.WarnLevel)
	return logrus.NewEntry(l)
}

// resynced waits until the listing housekeeping started, if any, is
// applied on the running loop.
func resynced(t *testing.T, l *Loop) {
	t.Helper()
	testutil.WaitFor(t, "the listing to be applied", func() bool {
		var busy bool
		if err := l.do(context.Background(), func() { busy = l.listing }); err != nil {
			t.Fatalf("ask the loop (is it running?): %v", err)
		}
		return !busy
	})
}

// flushed waits until the running loop's checkpoint writes are done and
// their outcomes recorded on the loop.
func flushed(t *testing.T, l *Loop) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.do(ctx, l.recordWrites); err != nil {
		t.Fatalf("record the writes' outcomes on the loop (is it running?): %v", err)
	}
}

// loopSetup is what a test's Loop is made of. newHarness and newRealHarness
// are the one way the tests build a Loop: from their defaults, changed by
// loopOptions in order.
type loopSetup struct {
	cfg Config
	o   Options
	// restore: Restore before the loop runs (the runtime's sandboxes
	// adopted, the store's records read)
	restore bool
	// run: Run the loop until the test ends
	run bool
	// available is the real harness's memory.available (its sampler's)
	available int64
}

// loopOption changes a loopSetup.
type loopOption func(*loopSetup)

// withConfig changes the loop's Config.
func withConfig(f func(*Config)) loopOption { return func(s *loopSetup) { f(&s.cfg) } }

// withOptions changes the loop's Options.
func withOptions(f func(*Options)) loopOption { return func(s *loopSetup) { f(&s.o) } }

func withRuntime(rt *fakeRuntime) loopOption { return func(s *loopSetup) { s.o.Runtime = rt } }

func withStore(st Store) loopOption { return func(s *loopSetup) { s.o.Store = st } }

func withEvictor(ev Evictor) loopOption { return func(s *loopSetup) { s.o.Evictor = ev } }

func withLog(log *logrus.Entry) loopOption { return func(s *loopSetup) { s.o.Log = log } }

// withAPI connects the loop to an API server stand-in.
func withAPI(api *fakeAPI) loopOption {
	return func(s *loopSetup) { s.o.API, s.o.Reporter = api, api }
}

// enforceRestored: restored records are enforced (Config.EnforceRestored).
func enforceRestored() loopOption { return func(s *loopSetup) { s.cfg.EnforceRestored = true } }

func stopTimeout(d time.Duration) loopOption { return func(s *loopSetup) { s.cfg.StopTimeout = d } }

// available is the node's memory.available the real harness's sampler
// reports at restore.
func available(b int64) loopOption { return func(s *loopSetup) { s.available = b } }

func restored() loopOption { return func(s *loopSetup) { s.restore = true } }

func running() loopOption { return func(s *loopSetup) { s.run = true } }

// newLoopSetup is the defaults (an hour between housekeeping passes: none
// within a test) changed by opts, with a fake runtime, an in-memory store, a
// ruleEvictor and the test log where opts set none (made only then: a
// benchmark that builds loops measures no fake it does not use).
func newLoopSetup(opts []loopOption) loopSetup {
	s := loopSetup{cfg: Config{HousekeepingInterval: time.Hour}, available: 3 << 30}
	for _, opt := range opts {
		opt(&s)
	}
	if s.o.Runtime == nil {
		s.o.Runtime = newFakeRuntime()
	}
	if s.o.Store == nil {
		s.o.Store = newMemStore()
	}
	if s.o.Evictor == nil {
		s.o.Evictor = &ruleEvictor{}
	}
	if s.o.Log == nil {
		s.o.Log = testLog()
	}
	return s
}

// build makes s's Loop, restored and running as s says.
func (s loopSetup) build(tb testing.TB) *Loop {
	tb.Helper()
	l, err := New(s.cfg, s.o)
	if err != nil {
		tb.Fatal(err)
	}
	if s.restore {
		if _, err := l.Restore(context.Background()); err != nil {
			tb.Fatal(err)
		}
	}
	if s.run {
		runLoop(tb, l)
	}
	return l
}

// runLoop runs l until the test ends.
func runLoop(tb testing.TB, l *Loop) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = l.Run(ctx) }()
	tb.Cleanup(func() { cancel(); <-done })
}
