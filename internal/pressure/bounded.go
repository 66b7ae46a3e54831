package pressure

import (
	"errors"
	"fmt"
	"time"
)

// errStatsTimeout reports a stats read that did not finish in time (a hung
// NFS or FUSE mount, a wedged cgroup file): the sample is an error, and
// until the stuck read returns every sample fails at once with it.
var errStatsTimeout = errors.New("stats read timed out")

// DefaultReadTimeout bounds one sample: a node sample takes about 20 µs.
const DefaultReadTimeout = time.Second

// Bounded reads stats off its caller's goroutine, bounded in time: the
// caller (the sync loop, which must never block on a file) gets the sample,
// or errStatsTimeout after the timeout while the read goes on in the
// sampler's own goroutine. One read runs at a time; while one is stuck the
// others fail at once, so nothing piles up.
type Bounded struct {
	s       *Sampler
	timeout time.Duration
	req     chan boundedReq
	done    chan struct{}
}

type boundedReq struct {
	pod    bool
	parent string
	resp   chan boundedResp // buffered: the worker never waits for a caller gone
}

type boundedResp struct {
	node NodeSample
	pod  PodStats
	err  error
}

// NewBounded starts the reading goroutine of s; Close stops it.
func NewBounded(s *Sampler, timeout time.Duration) *Bounded {
	if timeout <= 0 {
		timeout = DefaultReadTimeout
	}
	b := &Bounded{s: s, timeout: timeout, req: make(chan boundedReq), done: make(chan struct{})}
	go b.run()
	return b
}

func (b *Bounded) run() {
	for {
		select {
		case <-b.done:
			return
		case r := <-b.req:
			var res boundedResp
			switch {
			case r.pod:
				res.pod, res.err = b.s.Pod(r.parent)
			default:
				res.node, res.err = b.s.Node()
			}
			r.resp <- res
		}
	}
}

// Close stops the reading goroutine once its current read returns;
// idempotent.
func (b *Bounded) Close() {
	select {
	case <-b.done:
	default:
		close(b.done)
	}
}

func (b *Bounded) call(r boundedReq) boundedResp {
	r.resp = make(chan boundedResp, 1)
	t := time.NewTimer(b.timeout)
	defer t.Stop()
	select {
	case b.req <- r:
	case <-t.C:
		return boundedResp{err: fmt.Errorf("%w: an earlier read is still blocked after %s", errStatsTimeout, b.timeout)}
	case <-b.done:
		return boundedResp{err: errors.New("stats reader closed")}
	}
	select {
	case res := <-r.resp:
		return res
	case <-t.C:
		return boundedResp{err: fmt.Errorf("%w: no answer within %s", errStatsTimeout, b.timeout)}
	}
}

// Node takes one node sample (Sampler.Node), bounded in time.
func (b *Bounded) Node() (NodeSample, error) {
	res := b.call(boundedReq{})
	return res.node, res.err
}

// Pod reads one pod's stats (Sampler.Pod), bounded in time.
func (b *Bounded) Pod(cgroupParent string) (PodStats, error) {
	res := b.call(boundedReq{pod: true, parent: cgroupParent})
	return res.pod, res.err
}
