package guard

import (
	"context"
	"errors"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/pod"
)

// KillPod is the evictor's KillPodFunc. It runs on the loop goroutine: it
// marks the pod stopped at once (so it is not ranked again) and stops it in
// the background, so admissions go on during the grace period; the next
// eviction waits until this one has finished.
func (l *Loop) KillPod(_ context.Context, p *pod.Pod, grace time.Duration) error {
	cur, ok := l.pods[p.Key()]
	if !ok || cur.SandboxID == "" {
		return fmt.Errorf("kill pod %q: not known to the sync loop", p.String())
	}
	cur.State = pod.StateStopped
	cur.EvictedAt = l.now()
	// on disk before the stop starts: a restart mid-eviction keeps the
	// re-admission guard (restore takes the state from containerd anyway)
	_ = l.checkpoint(cur)
	l.publish()
	l.evicting = true
	victim := cur.Clone()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), grace+l.cfg.StopTimeout)
		defer cancel()
		err := l.stopPod(ctx, victim, grace)
		done := func() {
			l.evicting = false
			if err != nil {
				l.log.WithError(err).WithFields(podFields(victim)).Error("eviction failed")
				return
			}
			_ = l.checkpoint(victim)
			l.log.WithFields(podFields(victim)).Info("pod evicted")
		}
		select {
		case l.updates <- done:
		case <-l.done:
		}
	}()
	return nil
}

// stopPod stops every container of the sandbox with the grace period, then
// the sandbox (what the kubelet's killPod does through the runtime).
func (l *Loop) stopPod(ctx context.Context, p *pod.Pod, grace time.Duration) error {
	ctrs, err := l.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: p.SandboxID})
	if err != nil {
		return fmt.Errorf("stop pod %q: %w", p.String(), err)
	}
	var errs []error
	for _, c := range ctrs {
		if c.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		if err := l.rt.StopContainer(ctx, c.GetId(), int64(grace/time.Second)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := l.rt.StopPodSandbox(ctx, p.SandboxID); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stop pod %q: %w", p.String(), err)
	}
	return nil
}

// resync makes the known pods agree with the runtime's sandbox list: a
// sandbox that is no longer ready is stopped, one that is gone is removed.
// It is the fallback for missed runtime events (loop goroutine).
func (l *Loop) resync(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	sbs, err := l.rt.ListPodSandbox(ctx, nil)
	if err != nil {
		l.log.WithError(err).Debug("resync: cannot list sandboxes")
		return
	}
	states := make(map[string]runtimeapi.PodSandboxState, len(sbs))
	for _, sb := range sbs {
		states[sb.GetId()] = sb.GetState()
	}
	changed := false
	for key, p := range l.pods {
		if p.SandboxID == "" {
			continue // RunPodSandbox in flight
		}
		st, ok := states[p.SandboxID]
		switch {
		case !ok:
			l.log.WithFields(podFields(p)).Info("sandbox is gone from the runtime")
			if err := l.store.Delete(key); err != nil {
				l.log.WithError(err).WithFields(podFields(p)).Warn("cannot delete checkpoint")
			}
			delete(l.pods, key)
			changed = true
		case st != runtimeapi.PodSandboxState_SANDBOX_READY && p.State == pod.StateReady:
			l.log.WithFields(podFields(p)).Info("sandbox is no longer ready")
			p.State = pod.StateStopped
			_ = l.checkpoint(p)
			changed = true
		}
	}
	if changed {
		l.publish()
	}
}
