package guard

import (
	"context"
	"errors"
	"testing"
)

func TestDo(t *testing.T) {
	h := newHarness(t, true)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.loop.Do(cancelled, func() { t.Error("ran while the loop was not running") }); !errors.Is(err, context.Canceled) {
		t.Errorf("Do before Run: %v, want context.Canceled", err)
	}

	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = h.loop.Run(ctx); close(done) }()
	ran := false // written on the loop goroutine, read after Do returns
	if err := h.loop.Do(context.Background(), func() { ran = true }); err != nil || !ran {
		t.Fatalf("Do: ran=%v err=%v", ran, err)
	}
	stop()
	<-done
	if err := h.loop.Do(context.Background(), func() { t.Error("ran after the loop stopped") }); !errors.Is(err, ErrStopped) {
		t.Errorf("Do after Run: %v, want ErrStopped", err)
	}
}
