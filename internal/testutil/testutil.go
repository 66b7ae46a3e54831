// Package testutil is what cri-guard's Go tests share whatever package they
// test: waiting until a condition holds (WaitFor, Within) and a loopback
// address to give a listener (FreeAddr).
//
// It imports testing and is for tests only: _test.go files and the
// integration packages import it, cri-guard's own packages never do
// (TestNotInTheProduct checks the binaries).
package testutil

import (
	"net"
	"testing"
	"time"
)

// Bound is how long WaitFor waits: far more than any condition a passing
// test waits for takes, even on a loaded machine; it only ends a broken
// test.
const Bound = 30 * time.Second

// firstPoll and lastPoll space the looks at a condition: soon after the
// first (most conditions hold within milliseconds), then further apart, up
// to lastPoll (some conditions cost an HTTP request or a call to a loop).
const (
	firstPoll = time.Millisecond
	lastPoll  = 50 * time.Millisecond
)

// Within looks at cond until it holds or d has passed, and says whether it
// held: for a test whose own check is that something happens within d.
func Within(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for wait := firstPoll; !cond(); wait = min(2*wait, lastPoll) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(wait)
	}
	return true
}

// WaitFor waits until cond holds, and fails tb, naming what it waited for,
// if it does not within Bound.
func WaitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	if !Within(Bound, cond) {
		tb.Fatalf("timed out after %v waiting for %s", Bound, what)
	}
}

// FreeAddr is a loopback address (127.0.0.1:port) whose port was free when
// asked, for a process the test starts to listen on. Another process may
// take the port meanwhile; a test that can hand over a listener instead
// should.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
