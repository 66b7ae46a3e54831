package main

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// Back-off of a part retried in the background: a port another process
// holds or a kubeconfig written later (TLS bootstrap) usually comes right
// within seconds, so the first tries are quick; a part broken for good is
// tried once a minute, which costs nothing.
const (
	retryFirst = time.Second
	retryMax   = time.Minute
)

// startOrRetry tries once at once, so that a part that works is there
// when cri-guard says it is ready; on success it runs serve on a goroutine
// of wg, else it marks part degraded and goes on trying in the background
// (retryUntil), running serve once a try succeeds.
func startOrRetry(ctx context.Context, wg *sync.WaitGroup, h *health, part string, try func() error, serve func()) {
	err := try()
	if err == nil {
		wg.Go(serve)
		return
	}
	h.set(part, err.Error()+" (retrying)")
	wg.Go(func() {
		if retryUntil(ctx, h, part, try) {
			serve()
		}
	})
}

// retryUntil calls try until it succeeds or ctx ends, waiting a jittered,
// doubling delay between tries (the first one before the first try); each
// failure marks part degraded with its error, a success clears it. It
// returns whether try succeeded.
func retryUntil(ctx context.Context, h *health, part string, try func() error) bool {
	delay := retryFirst
	for {
		if err := wait(ctx, delay); err != nil {
			return false
		}
		delay = min(2*delay, retryMax)
		err := try()
		if err == nil {
			h.clear(part)
			return true
		}
		h.set(part, err.Error()+" (retrying)")
	}
}

// wait sleeps d with ±20 % jitter, so that nodes that lost a shared
// dependency together do not retry in step; an error when ctx ends first.
func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(time.Duration(float64(d) * (0.8 + 0.4*rand.Float64())))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
