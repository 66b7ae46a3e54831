// Package bounded runs calls that may block on a file (a wedged cgroup
// file, a hung NFS or FUSE mount) off the caller's goroutine, bounded in
// time: the sync loop, which must never block on a file, gets the call's
// result or a timeout error while the call goes on in the worker's own
// goroutine. One call runs at a time; while one is stuck the others fail
// at the timeout, so nothing piles up. It imports nothing of cri-guard's.
package bounded

import (
	"errors"
	"fmt"
	"time"
)

// Worker is the goroutine that makes the calls, one at a time.
type Worker struct {
	timeout time.Duration
	errTO   error  // wrapped by every timeout error
	what    string // what a call is, for the errors ("read", "kill")
	closed  error
	req     chan func()
	done    chan struct{}
}

// New starts a worker; Close stops it. errTimeout is wrapped by the errors
// of calls that time out; what names a call in them ("read"); closed is
// the error of a call made after Close.
func New(timeout time.Duration, errTimeout error, what, closed string) *Worker {
	w := &Worker{timeout: timeout, errTO: errTimeout, what: what, closed: errors.New(closed),
		req: make(chan func()), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *Worker) run() {
	for {
		select {
		case <-w.done:
			return
		case f := <-w.req:
			f()
		}
	}
}

// Close stops the worker once its current call returns; idempotent.
func (w *Worker) Close() {
	select {
	case <-w.done:
	default:
		close(w.done)
	}
}

type result[T any] struct {
	v   T
	err error
}

// Do makes f on w, bounded by w's timeout: f's result, or a timeout error
// (the worker still busy with an earlier call, or f not done in time).
func Do[T any](w *Worker, f func() (T, error)) (T, error) {
	resp := make(chan result[T], 1) // buffered: the worker never waits for a caller gone
	job := func() {
		v, err := f()
		resp <- result[T]{v, err}
	}
	var zero T
	t := time.NewTimer(w.timeout)
	defer t.Stop()
	select {
	case w.req <- job:
	case <-t.C:
		return zero, fmt.Errorf("%w: an earlier %s is still blocked after %s", w.errTO, w.what, w.timeout)
	case <-w.done:
		return zero, w.closed
	}
	select {
	case r := <-resp:
		return r.v, r.err
	case <-t.C:
		return zero, fmt.Errorf("%w: no answer within %s", w.errTO, w.timeout)
	}
}
