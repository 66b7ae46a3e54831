package main

import (
	"context"
	"math/rand/v2"
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

// retryUntil calls try until it succeeds or ctx ends, waiting a jittered,
// doubling delay between tries; each failure marks part degraded with its
// error, a success clears it. It returns whether try succeeded.
func retryUntil(ctx context.Context, h *health, part string, try func() error) bool {
	delay := retryFirst
	for {
		err := try()
		if err == nil {
			h.Clear(part)
			return true
		}
		h.Set(part, err.Error()+" (retrying)")
		// ±20 %: nodes that lost a shared dependency together do not retry in step
		wait := time.Duration(float64(delay) * (0.8 + 0.4*rand.Float64()))
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
		delay = min(2*delay, retryMax)
	}
}
