package podkill

import (
	"errors"
	"fmt"
	"time"
)

// errTimeout reports a kill that did not finish in time (a wedged cgroup
// file): the kill is an error, and until the stuck one returns every kill
// fails with it.
var errTimeout = errors.New("pod kill timed out")

// DefaultTimeout bounds one kill: a write to cgroup.kill, or a few reads of
// cgroup.procs and signals.
const DefaultTimeout = time.Second

// Bounded kills off its caller's goroutine, bounded in time: the caller
// (the sync loop, which must never block on a file) gets the kill's result,
// or errTimeout after the timeout while the kill goes on in Bounded's own
// goroutine. One kill runs at a time; while one is stuck the others fail
// at the timeout, so nothing piles up.
type Bounded struct {
	k       *Killer
	timeout time.Duration
	req     chan killReq
	done    chan struct{}
}

type killReq struct {
	parent string
	resp   chan killResp // buffered: the worker never waits for a caller gone
}

type killResp struct {
	killed int
	err    error
}

// NewBounded starts the killing goroutine of k; Close stops it. A timeout
// not above zero is DefaultTimeout.
func NewBounded(k *Killer, timeout time.Duration) *Bounded {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	b := &Bounded{k: k, timeout: timeout, req: make(chan killReq), done: make(chan struct{})}
	go b.run()
	return b
}

func (b *Bounded) run() {
	for {
		select {
		case <-b.done:
			return
		case r := <-b.req:
			var res killResp
			res.killed, res.err = b.k.KillPod(r.parent)
			r.resp <- res
		}
	}
}

// Close stops the killing goroutine once its current kill returns;
// idempotent.
func (b *Bounded) Close() {
	select {
	case <-b.done:
	default:
		close(b.done)
	}
}

// KillPod kills a pod cgroup's processes (Killer.KillPod), bounded in
// time.
func (b *Bounded) KillPod(cgroupParent string) (int, error) {
	r := killReq{parent: cgroupParent, resp: make(chan killResp, 1)}
	t := time.NewTimer(b.timeout)
	defer t.Stop()
	select {
	case b.req <- r:
	case <-t.C:
		return 0, fmt.Errorf("%w: an earlier kill is still blocked after %s", errTimeout, b.timeout)
	case <-b.done:
		return 0, errors.New("pod killer closed")
	}
	select {
	case res := <-r.resp:
		return res.killed, res.err
	case <-t.C:
		return 0, fmt.Errorf("%w: no answer within %s", errTimeout, b.timeout)
	}
}
