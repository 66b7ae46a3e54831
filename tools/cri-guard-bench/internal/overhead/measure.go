package overhead

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/benchutil"
)

// side is one way of reaching containerd.
type side struct {
	name string
	rt   runtimeapi.RuntimeServiceClient
	im   runtimeapi.ImageServiceClient
}

// method is one measured CRI call; i varies the arguments (e.g. which sandbox).
type method struct {
	name  string
	class string // "tiny", "list", "stats" or "cycle": which target applies
	call  func(ctx context.Context, s side, i int) error
}

func methods(w *workload) []method {
	return []method{
		{"Version", "tiny", func(ctx context.Context, s side, _ int) error {
			_, err := s.rt.Version(ctx, &runtimeapi.VersionRequest{})
			return err
		}},
		{"Status", "tiny", func(ctx context.Context, s side, _ int) error {
			_, err := s.rt.Status(ctx, &runtimeapi.StatusRequest{})
			return err
		}},
		{"ListPodSandbox", "list", func(ctx context.Context, s side, _ int) error {
			_, err := s.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
			return err
		}},
		{"ListContainers", "list", func(ctx context.Context, s side, _ int) error {
			_, err := s.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
			return err
		}},
		{"ListContainerStats", "stats", func(ctx context.Context, s side, _ int) error {
			_, err := s.rt.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{})
			return err
		}},
		{"PodSandboxStatus", "tiny", func(ctx context.Context, s side, i int) error {
			_, err := s.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: w.sandboxIDs[i%len(w.sandboxIDs)]})
			return err
		}},
		{"ImageFsInfo", "tiny", func(ctx context.Context, s side, _ int) error {
			_, err := s.im.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
			return err
		}},
	}
}

// latency is the result of one method: samples[0] direct, then one per
// cri-guard under test.
type latency struct {
	method  method
	samples [][]time.Duration
}

// measureLatency calls m on every side in turn n times (the order rotates
// every iteration so no side always runs first), after a warm-up.
func measureLatency(ctx context.Context, m method, sides []side, n int) (latency, error) {
	res := latency{method: m, samples: make([][]time.Duration, len(sides))}
	for i := range warmup {
		for _, s := range sides {
			if err := m.call(ctx, s, i); err != nil {
				return res, fmt.Errorf("%s %s: %w", m.name, s.name, err)
			}
		}
	}
	for i := range n {
		for k := range sides {
			j := (i + k) % len(sides)
			start := time.Now()
			if err := m.call(ctx, sides[j], i); err != nil {
				return res, fmt.Errorf("%s %s: %w", m.name, sides[j].name, err)
			}
			res.samples[j] = append(res.samples[j], time.Since(start))
		}
	}
	return res, nil
}

// throughput runs clients goroutines calling m for d and returns calls/s.
func throughput(ctx context.Context, m method, s side, clients int, d time.Duration) (float64, int64, error) {
	var calls atomic.Int64
	var firstErr error
	var once sync.Once
	// Calls run on ctx, not on a deadline of d: a deadline would make the
	// calls in flight at the end fail (on either side of the hop).
	var stop atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c; !stop.Load(); i += clients {
				if err := m.call(ctx, s, i); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				calls.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return 0, 0, fmt.Errorf("%s %s: %w", m.name, s.name, firstErr)
	}
	n := calls.Load()
	return float64(n) / elapsed.Seconds(), n, nil
}

// warmup is the number of unmeasured calls per side before each method.
const warmup = 20

// warmUpTime is how long every side is called, all methods in turn, before
// anything is measured. Without it the first method measured paid for the
// switch from an idle machine to a busy one: in a run with the method order
// changed, the first method came out 35-45 µs slower than its usual figure,
// on every side.
const warmUpTime = 3 * time.Second

// warmUp calls every method but the slow stats call on every side in turn
// until d has passed.
func warmUp(ctx context.Context, ms []method, sides []side, d time.Duration) error {
	end := time.Now().Add(d)
	for i := 0; time.Now().Before(end); i++ {
		for _, m := range ms {
			if m.class == "stats" {
				continue
			}
			for _, s := range sides {
				if err := m.call(ctx, s, i); err != nil {
					return fmt.Errorf("warm-up %s %s: %w", m.name, s.name, err)
				}
			}
		}
	}
	return nil
}

// sandboxCycle is RunPodSandbox + StopPodSandbox + RemovePodSandbox of a new
// host-network Burstable sandbox (admitted by cri-guard without pressure):
// what admission and checkpointing add to a sandbox's life.
func sandboxCycle(o benchOptions, runID string) method {
	var n atomic.Int64
	return method{name: "RunPodSandbox+Stop+Remove", class: "cycle", call: func(ctx context.Context, s side, _ int) error {
		uid := fmt.Sprintf("%s-cycle-%d", runID, n.Add(1))
		cfg := &runtimeapi.PodSandboxConfig{
			Metadata: &runtimeapi.PodSandboxMetadata{Name: "cycle-" + uid, Namespace: "cri-guard-bench", Uid: uid},
			Labels:   map[string]string{benchutil.BenchLabel: runID},
			Linux: &runtimeapi.LinuxPodSandboxConfig{
				CgroupParent: fmt.Sprintf("%s/kubepods/burstable/pod%s", o.CgroupRoot, uid),
				SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
					NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
				},
			},
		}
		resp, err := s.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
		if err != nil {
			return err
		}
		if _, err := s.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: resp.PodSandboxId}); err != nil {
			return err
		}
		_, err = s.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: resp.PodSandboxId})
		return err
	}}
}
