package guard

import "context"

// Do runs f on the loop goroutine and waits for it, so that f may touch
// state the loop owns (e.g. evictor.Manager.SetThresholds on a SIGHUP
// reload). It returns ErrStopped when the loop is not running, or ctx's
// error when ctx ends before f was started.
func (l *Loop) Do(ctx context.Context, f func()) error {
	return l.do(ctx, f)
}
