package guard

import (
	"context"
	"time"

	"github.com/cri-guard/cri-guard/pressure"
)

// SetThresholds installs reloaded eviction thresholds (a SIGHUP) on the
// loop goroutine, which owns the evictor, and returns the thresholds added
// and removed. It returns ErrStopped when the loop is not running, or
// ctx's error when ctx ends before the loop took them.
func (l *Loop) SetThresholds(ctx context.Context, ts []pressure.Threshold, transition time.Duration) (added, removed []string, err error) {
	err = l.do(ctx, func() { added, removed = l.ev.SetThresholds(ts, transition) })
	return added, removed, err
}
