package main

import (
	"context"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cri-guard/cri-guard/internal/guard"
)

// restore replays the checkpoints, retrying while containerd cannot be
// reached or is not ready. cri-guard does not serve before it has finished,
// for at most bound: then it serves degraded (said in the log, status and
// metrics) and retryRestore goes on in the background.
func restore(ctx context.Context, loop *guard.Loop, bound time.Duration, log *logrus.Entry) error {
	if bound <= 0 {
		bound = defaultRestoreTimeout
	}
	deadline := time.Now().Add(bound)
	for attempt := 0; ; attempt++ {
		_, err := loop.Restore(ctx)
		if err == nil {
			return nil
		}
		// containerd unreachable, or up but still initialising ("server is
		// not initialized yet"): wait for it
		if attempt%20 == 0 {
			log.WithError(err).Warn("restore failed: retrying")
		}
		if !waitable(err) {
			log.WithError(err).Error("restore cannot finish by waiting: serving degraded (restored pods not known yet), retrying in the background")
			loop.ServeDegraded(err)
			return nil
		}
		if time.Now().After(deadline) {
			log.WithError(err).WithField("waited", bound).Error("restore did not finish: serving degraded (restored pods not known yet), retrying in the background")
			loop.ServeDegraded(err)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("restore: %w", ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// waitable reports whether a failed restore may succeed by waiting for the
// runtime. An answer larger than a message may carry
// (codes.ResourceExhausted: containerd's own 16 MiB send limit, which a
// sandbox list with very large configs exceeds, or cri-guard's receive
// limit) comes again on every try: start-up serves degraded at once rather
// than keep the kubelet from the runtime for the whole bound, and the
// background retry finishes the restore once the list fits.
func waitable(err error) bool {
	return status.Code(err) != codes.ResourceExhausted
}

// retryRestore completes a restore that start-up gave up waiting for,
// every 5 s until it succeeds or ctx ends: each try reads off the loop,
// for at most 30 s, and is applied on the running loop.
func retryRestore(ctx context.Context, loop *guard.Loop, log *logrus.Entry) {
	for attempt := 1; loop.Degraded() != nil; attempt++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		rep, err := loop.RetryRestore(rctx)
		cancel()
		if err == nil {
			log.WithField("records", rep.Records).WithField("attempts", attempt).Info("restore finished: no longer degraded")
			return
		}
		if attempt%12 == 0 {
			log.WithError(err).Warn("restore still failing: serving degraded")
		}
	}
}
