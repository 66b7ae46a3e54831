package guard

import (
	"context"
	"time"

	"github.com/cri-guard/cri-guard/internal/pressure"
)

// SetThresholds installs reloaded eviction thresholds (a SIGHUP) on the
// loop goroutine, which owns the evictor and the wake-ups, and returns the
// thresholds added and removed. When any changed, the kernel memory
// notifications are re-armed at once at the new levels. It returns
// errStopped when the loop is not running, or ctx's error when ctx ends
// before the loop took them.
func (l *Loop) SetThresholds(ctx context.Context, ts []pressure.Threshold, transition time.Duration) (added, removed []string, err error) {
	err = l.do(ctx, func() {
		added, removed = l.ev.SetThresholds(ts, transition)
		if len(added)+len(removed) > 0 {
			l.armNotifiers(ts)
		}
	})
	return added, removed, err
}
