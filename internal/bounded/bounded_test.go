package bounded

import (
	"errors"
	"testing"
	"time"
)

var errTO = errors.New("timed out")

// TestDo: a call's result comes back; a stuck call times out, and so does
// every call while it is stuck; once it returns the worker answers again;
// after Close a call fails at once.
func TestDo(t *testing.T) {
	w := New(50*time.Millisecond, errTO, "read", "reader closed")
	if v, err := Do(w, func() (int, error) { return 7, nil }); v != 7 || err != nil {
		t.Fatalf("Do = %d, %v; want 7, nil", v, err)
	}
	release := make(chan struct{})
	if _, err := Do(w, func() (int, error) { <-release; return 1, nil }); !errors.Is(err, errTO) {
		t.Fatalf("stuck call: %v, want the timeout", err)
	}
	if _, err := Do(w, func() (int, error) { return 2, nil }); !errors.Is(err, errTO) {
		t.Fatalf("call behind a stuck one: %v, want the timeout", err)
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for {
		v, err := Do(w, func() (int, error) { return 3, nil })
		if err == nil && v == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker did not answer again after the stuck call returned: %v", err)
		}
	}
	w.Close()
	w.Close()
	if _, err := Do(w, func() (int, error) { return 4, nil }); err == nil || errors.Is(err, errTO) {
		t.Fatalf("after Close: %v, want the closed error", err)
	}
}
