//go:build integration

package host

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/integration/harness"
	"github.com/cri-guard/cri-guard/internal/checkpoint"
	"github.com/cri-guard/cri-guard/internal/pod"
)

// runLabel marks the sandboxes of one crash or restore test run, so the
// checks ignore pods of tests running next to it on the same containerd.
const runLabel = "cri-guard-run"

// guardProc runs cri-guard on a fixed socket and state dir across restarts.
type guardProc struct {
	t        *testing.T
	env      harness.Runtime
	socket   string
	stateDir string
	extra    []string
	dir      string
	starts   int
	cur      *harness.Guard
}

func newGuardProc(t *testing.T, env harness.Runtime, extra ...string) *guardProc {
	dir := harness.ShortTempDir(t)
	gp := &guardProc{t: t, env: env, socket: filepath.Join(dir, "cri-guard.sock"), stateDir: filepath.Join(dir, "state"), extra: extra, dir: dir}
	t.Cleanup(func() {
		if gp.cur != nil {
			gp.cur.Stop(t)
		}
	})
	return gp
}

// start runs cri-guard and waits until it answers Version (it serves only
// after Restore).
func (gp *guardProc) start() {
	gp.t.Helper()
	if err := gp.startWithin(30 * time.Second); err != nil {
		gp.t.Fatalf("cri-guard %v", err)
	}
}

// startWithin is start with a bound and an error instead of a failure, for
// a cri-guard that may never listen; the error ends with its log's tail.
// The process runs until the test's cleanup either way.
func (gp *guardProc) startWithin(bound time.Duration) error {
	t := gp.t
	t.Helper()
	gp.starts++
	g := harness.Spawn(t, guardBin, gp.socket, filepath.Join(gp.dir, fmt.Sprintf("cri-guard-%02d.log", gp.starts)),
		append([]string{"--runtime-endpoint", gp.env.Containerd, "--state-dir", gp.stateDir}, gp.extra...)...)
	gp.cur = g
	served, exited, err := g.ServesOrExits(t, bound)
	switch {
	case exited:
		gp.cur = nil
		return fmt.Errorf("exited at start-up: %v\n%s", err, g.LogTail())
	case !served:
		return fmt.Errorf("not answering Version %v after its start (it does not listen): %v\n%s", bound, err, g.LogTail())
	}
	return nil
}

// kill sends SIGKILL and waits for the process to be gone.
func (gp *guardProc) kill() {
	g := gp.cur
	gp.cur = nil
	if err := g.Cmd.Process.Kill(); err != nil {
		gp.t.Fatalf("kill cri-guard: %v", err)
	}
	err := g.Err()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != -1 {
		gp.t.Fatalf("cri-guard exit after SIGKILL: %v, want killed by signal\n%s", err, g.LogTail())
	}
}

// signal sends sig (SIGTERM, SIGINT) and waits for a clean exit.
func (gp *guardProc) signal(sig os.Signal) {
	gp.t.Helper()
	g := gp.cur
	gp.cur = nil
	if err := g.Cmd.Process.Signal(sig); err != nil {
		gp.t.Fatalf("signal cri-guard: %v", err)
	}
	select {
	case <-g.Done():
		if err := g.Err(); err != nil {
			gp.t.Fatalf("cri-guard exit after %v: %v\n%s", sig, err, g.LogTail())
		}
	case <-time.After(30 * time.Second):
		_ = g.Cmd.Process.Kill()
		gp.t.Fatalf("cri-guard did not stop within 30s of %v\n%s", sig, g.LogTail())
	}
}

// terminate stops cri-guard with SIGINT, failing the test on an unclean exit.
func (gp *guardProc) terminate() {
	gp.cur.Stop(gp.t)
	gp.cur = nil
}

// records reads the checkpoints of this run (runLabel == run) from the state dir.
func (gp *guardProc) records(run string) map[string]checkpoint.Record {
	gp.t.Helper()
	// read beside the running cri-guard, which holds the store's lock
	recs, err := checkpoint.Inspect(gp.stateDir)
	if err != nil {
		gp.t.Fatalf("list checkpoints: %v", err)
	}
	out := map[string]checkpoint.Record{}
	for _, r := range recs {
		if r.Pod.Labels[runLabel] == run {
			out[r.Pod.Key()] = r
		}
	}
	return out
}

// restoreTotals sums the counts of the "restore done" lines of every
// start's log (records, dropped, completed, adopted, ...), and counts the
// records settled while serving: by a refusal that named the sandbox
// (settled_reserved) and by a listing (settled_listed).
func (gp *guardProc) restoreTotals() map[string]int {
	totals := map[string]int{}
	logs, _ := filepath.Glob(filepath.Join(gp.dir, "cri-guard-*.log"))
	for _, name := range logs {
		b, err := os.ReadFile(name)
		if err != nil {
			gp.t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			switch {
			case strings.Contains(line, "answer was lost: recorded"):
				totals["settled_reserved"]++
			case strings.Contains(line, "pending record completed from the runtime's listing"):
				totals["settled_listed"]++
			}
			if !strings.Contains(line, "restore done") {
				continue
			}
			for _, m := range restoreField.FindAllStringSubmatch(line, -1) {
				n, _ := strconv.Atoi(m[2])
				totals[m[1]] += n
			}
		}
	}
	return totals
}

var restoreField = regexp.MustCompile(`\b(records|dropped|completed|unsettled|adopted|admitted|refused|evicting)=(\d+)`)

// containerdSandboxes lists this run's sandboxes directly on containerd.
func containerdSandboxes(t *testing.T, env harness.Runtime, run string) map[string]*runtimeapi.PodSandbox {
	t.Helper()
	conn := harness.Dial(t, env.Containerd)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := runtimeapi.NewRuntimeServiceClient(conn).ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{runLabel: run}},
	})
	if err != nil {
		t.Fatalf("list sandboxes on containerd: %v", err)
	}
	out := map[string]*runtimeapi.PodSandbox{}
	for _, sb := range resp.Items {
		out[sb.Id] = sb
	}
	return out
}

// removeRunAtCleanup stops and removes the run's sandboxes directly on
// containerd, one bounded call at a time (a loaded machine needs more than
// removePodsAtCleanup's shared minute for fifty of them). Registered after
// removePodsAtCleanup, it runs before it.
func removeRunAtCleanup(t *testing.T, env harness.Runtime, run string) {
	t.Cleanup(func() {
		conn := harness.Dial(t, env.Containerd)
		defer conn.Close()
		rt := runtimeapi.NewRuntimeServiceClient(conn)
		ids := make(chan string)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for id := range ids {
					removeSandbox(t, rt, id)
				}
			})
		}
		for id := range containerdSandboxes(t, env, run) {
			ids <- id
		}
		close(ids)
		wg.Wait()
	})
}

// removeSandbox stops and removes one sandbox on containerd.
func removeSandbox(t *testing.T, rt runtimeapi.RuntimeServiceClient, id string) {
	for _, call := range []func(context.Context) error{
		func(ctx context.Context) error {
			_, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
			return err
		},
		func(ctx context.Context) error {
			_, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
			return err
		},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := call(ctx)
		cancel()
		if err != nil {
			t.Errorf("cleanup: sandbox %s: %v", id, err)
			return
		}
	}
}

// crashClient creates sandboxes through cri-guard the way the kubelet does:
// a call that fails because cri-guard is gone is retried with the same uid
// and attempt; a retry refused because containerd already has that sandbox
// (its name is reserved) is settled by listing the pod's sandboxes; a
// sandbox that is not ready is recreated with attempt+1.
type crashClient struct {
	t   *testing.T
	rt  runtimeapi.RuntimeServiceClient
	run string

	mu       sync.Mutex
	answered map[string]string // pod key → sandbox id returned by a successful RunPodSandbox
	found    map[string]string // pod key → sandbox id found by listing after a reserved-name refusal
	// superseded: pod key → id of a sandbox containerd created but left
	// NOTREADY (its creation was cut off); the client made attempt+1, as the
	// kubelet does on SandboxChanged. The old one stays until removed.
	superseded map[string]string
	retries    atomic.Int64
	errs       map[string]int      // retried errors, by message
	trace      map[string][]string // each pod's calls and what they got, by uid
	began      time.Time
}

// traceOf returns uid's trace, a line each.
func (c *crashClient) traceOf(uid string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.trace[uid], "\n")
}

// note adds one line to uid's trace.
func (c *crashClient) note(uid, format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trace[uid] = append(c.trace[uid], fmt.Sprintf("+%.3fs ", time.Since(c.began).Seconds())+fmt.Sprintf(format, args...))
}

func (c *crashClient) create(ctx context.Context, i int) {
	uid := fmt.Sprintf("%s-%03d", c.run, i)
	for attempt := uint32(0); ; {
		if ctx.Err() != nil {
			c.t.Errorf("pod %s: gave up: %v", uid, ctx.Err())
			return
		}
		cfg := podConfig(fmt.Sprintf("crash-%03d", i), uid)
		cfg.Metadata.Attempt = attempt
		cfg.Labels[runLabel] = c.run
		callCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		resp, err := c.rt.RunPodSandbox(callCtx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
		cancel()
		key := pod.Key(uid, attempt)
		if err != nil {
			c.note(uid, "RunPodSandbox %s: %v", key, err)
		} else {
			c.note(uid, "RunPodSandbox %s: %s", key, resp.PodSandboxId)
		}
		switch {
		case err == nil:
			c.mu.Lock()
			c.answered[key] = resp.PodSandboxId
			c.mu.Unlock()
			return
		case status.Code(err) == codes.Unavailable:
			c.retries.Add(1)
			c.mu.Lock()
			c.errs[status.Convert(err).Message()]++
			c.mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			continue
		case strings.Contains(err.Error(), "reserved"):
			sb, err := c.lookup(ctx, uid, attempt)
			c.note(uid, "listed %s: %v (error %v)", key, sb, err)
			if err != nil || sb == nil {
				c.retries.Add(1)
				time.Sleep(50 * time.Millisecond)
				continue // not listed yet, or cri-guard went away: try again
			}
			if sb.State != runtimeapi.PodSandboxState_SANDBOX_READY {
				c.mu.Lock()
				c.superseded[key] = sb.Id
				c.mu.Unlock()
				attempt++ // SandboxChanged: the kubelet makes a new attempt
				continue
			}
			c.mu.Lock()
			c.found[key] = sb.Id
			c.mu.Unlock()
			return
		default:
			c.t.Errorf("RunPodSandbox %s: %v (code %s)", key, err, status.Code(err))
			return
		}
	}
}

// lookup finds the sandbox of uid/attempt through cri-guard.
func (c *crashClient) lookup(ctx context.Context, uid string, attempt uint32) (*runtimeapi.PodSandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := c.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{runLabel: c.run}},
	})
	if err != nil {
		return nil, err
	}
	for _, sb := range resp.Items {
		if sb.Metadata.Uid == uid && sb.Metadata.Attempt == attempt {
			return sb, nil
		}
	}
	return nil, nil
}

// TestCrashRestore SIGKILLs cri-guard at random moments while a client
// creates 50 sandboxes through it with 8 goroutines, and restarts it on the
// same socket and state dir, 10 times: round r kills it 50–600 ms after the
// creation of pod 5r+4 began. Calls cut off are retried as the kubelet
// does. Afterwards, while the last cri-guard still runs (within 15 s: its
// listings, every second here, complete a record whose call lost its
// answer) and again after a clean restart, the checkpoints must agree
// with containerd: every sandbox
// of the run has a record with its id, no record points at a missing
// sandbox (or is left pending), and every id a RunPodSandbox answered is
// the id of its record.
func TestCrashRestore(t *testing.T) {
	env := needRuntime(t)
	removePodsAtCleanup(t, env)
	const (
		rounds    = 10
		perRound  = 5
		pods      = rounds * perRound
		workers   = 8
		minDelay  = 50 * time.Millisecond
		killRange = 550 * time.Millisecond
	)
	run := "crash" + harness.NewUID(t)[:8]
	removeRunAtCleanup(t, env, run)
	// no metrics listener or admin socket: their default addresses are
	// shared with every other cri-guard on this machine
	gp := newGuardProc(t, env, writeConfig(t, `
metricsAddress: ""
adminSocket: ""
housekeepingInterval: 1s
`)...)
	gp.start()

	conn := harness.Dial(t, gp.socket)
	t.Cleanup(func() { conn.Close() })
	client := &crashClient{t: t, rt: runtimeapi.NewRuntimeServiceClient(conn), run: run, answered: map[string]string{}, found: map[string]string{}, superseded: map[string]string{}, errs: map[string]int{}, trace: map[string][]string{}, began: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// All pods are queued at once; the kills are paced by progress: kill r
	// comes 50–600 ms after the creation of pod 5r+4 began, so they spread
	// over the whole workload however slow containerd is.
	queue := make(chan int, pods)
	for i := range pods {
		queue <- i
	}
	var started atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range queue {
				started.Add(1)
				client.create(ctx, i)
			}
		})
	}
	began := time.Now()
	var killedAt []time.Duration
	for r := range rounds {
		for started.Load() < int64((r+1)*perRound) && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(minDelay + rand.N(killRange))
		gp.kill()
		killedAt = append(killedAt, time.Since(began).Round(time.Millisecond))
		gp.start()
	}
	close(queue)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("retried errors: %v", client.errs)
	t.Logf("%d pods through %d SIGKILLs at %v; %d answered, %d found after a reserved-name refusal, %d superseded (left NOTREADY by containerd), %d retried calls, %v",
		pods, rounds, killedAt, len(client.answered), len(client.found), len(client.superseded), client.retries.Load(), time.Since(began).Round(time.Millisecond))

	// problems compares the checkpoints with containerd once.
	problems := func(when string) (out []string) {
		t.Helper()
		errorf := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
		recs := gp.records(run)
		sbs := containerdSandboxes(t, env, run)
		bySandbox := map[string]checkpoint.Record{}
		for key, r := range recs {
			if r.SandboxID == "" {
				errorf("%s: record %s is still pending (state %s)", when, key, r.State)
				continue
			}
			if _, ok := sbs[r.SandboxID]; !ok {
				errorf("%s: record %s points at sandbox %s, which containerd does not have", when, key, r.SandboxID)
			}
			bySandbox[r.SandboxID] = r
		}
		for id, sb := range sbs {
			r, ok := bySandbox[id]
			key := pod.Key(sb.Metadata.Uid, sb.Metadata.Attempt)
			switch {
			case !ok:
				errorf("%s: containerd sandbox %s (%s, %s) has no record; the client's calls:\n%s", when, id, key, sb.State, client.traceOf(sb.Metadata.Uid))
			case r.Pod.Key() != key:
				errorf("%s: record of sandbox %s is %s, containerd says %s", when, id, r.Pod.Key(), key)
			}
		}
		client.mu.Lock()
		defer client.mu.Unlock()
		for key, id := range client.answered {
			if r, ok := recs[key]; !ok || r.SandboxID != id {
				errorf("%s: RunPodSandbox %s answered %s, record: %+v (found %v)", when, key, id, r.SandboxID, ok)
			}
		}
		for key, id := range client.found {
			if r, ok := recs[key]; !ok || r.SandboxID != id {
				errorf("%s: sandbox %s of %s (found by listing) has record %q (found %v)", when, id, key, r.SandboxID, ok)
			}
		}
		if got := len(client.answered) + len(client.found) + len(client.superseded); len(sbs) != got {
			errorf("%s: containerd has %d sandboxes of the run, the client created %d (%d answered, %d found, %d superseded)",
				when, len(sbs), got, len(client.answered), len(client.found), len(client.superseded))
		}
		for key, id := range client.superseded {
			if r, ok := recs[key]; !ok || r.SandboxID != id {
				errorf("%s: superseded sandbox %s of %s has record %q (found %v)", when, id, key, r.SandboxID, ok)
			}
		}
		if len(out) == 0 {
			t.Logf("%s: %d records, %d sandboxes in containerd", when, len(recs), len(sbs))
		}
		return out
	}
	// check waits until they agree: a pending record whose call lost its
	// answer is completed by the next listing (housekeeping, every second
	// here), not at once.
	check := func(when string) {
		t.Helper()
		start := time.Now()
		for {
			out := problems(when)
			if len(out) == 0 {
				t.Logf("%s: agreed after %v", when, time.Since(start).Round(time.Millisecond))
				return
			}
			if time.Since(start) > 15*time.Second {
				for _, p := range out {
					t.Error(p)
				}
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	t.Logf("restores summed over %d starts: %v", gp.starts, gp.restoreTotals())
	check("after the last restart")
	gp.terminate()
	gp.start()
	check("after a clean restart")
}
