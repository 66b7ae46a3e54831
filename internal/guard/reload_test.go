package guard

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/internal/pressure"
)

// TestSetThresholds: reloaded thresholds reach the evictor on the loop
// goroutine, only while the loop runs.
func TestSetThresholds(t *testing.T) {
	h := newHarness(t, enforceRestored())
	ts, err := pressure.ParseThresholds(pressure.ThresholdConfig{Hard: map[string]string{"memory.available": "1Gi"}})
	if err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := h.loop.SetThresholds(cancelled, ts, time.Minute); !errors.Is(err, context.Canceled) {
		t.Errorf("SetThresholds before Run: %v, want context.Canceled", err)
	}

	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = h.loop.Run(ctx); close(done) }()
	added, _, err := h.loop.SetThresholds(context.Background(), ts, time.Minute)
	if err != nil || !slices.Equal(added, []string{ts[0].String()}) {
		t.Fatalf("SetThresholds: added %v, %v; want %v", added, err, ts[0].String())
	}
	stop()
	<-done
	if _, _, err := h.loop.SetThresholds(context.Background(), ts, time.Minute); !errors.Is(err, errStopped) {
		t.Errorf("SetThresholds after Run: %v, want ErrStopped", err)
	}
}
