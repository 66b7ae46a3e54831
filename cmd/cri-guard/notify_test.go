package main

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/cri-guard/cri-guard/internal/config"
	"github.com/cri-guard/cri-guard/internal/runtimeproxy/fakeruntime"
)

// TestRunNotifiesSystemd runs the daemon with NOTIFY_SOCKET and a watchdog
// set and checks that systemd would get READY=1, then WATCHDOG=1, then
// STOPPING=1 at shutdown.
func TestRunNotifiesSystemd(t *testing.T) {
	dir, err := os.MkdirTemp("", "cgn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sockPath := filepath.Join(dir, "notify.sock")
	sock, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sockPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	t.Setenv("NOTIFY_SOCKET", sockPath)
	t.Setenv("WATCHDOG_USEC", strconv.Itoa(int((400 * time.Millisecond).Microseconds())))
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))

	fake := fakeruntime.Start(t, filepath.Join(dir, "rt.sock"))
	opts := defaultOptions()
	opts.Config.Listen = filepath.Join(dir, "g", "cri-guard.sock")
	opts.Config.RuntimeEndpoint = fake.Path
	opts.Config.StateDir = filepath.Join(dir, "state")
	opts.Config.AdminSocket = ""
	opts.Config.MetricsAddress = ""
	opts.Config.PSITrigger = ""
	opts.Config.HousekeepingInterval = config.Duration{Duration: 100 * time.Millisecond}
	log := logrus.New()
	log.SetOutput(io.Discard)

	msgs := make(chan string, 100)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := sock.Read(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(buf[:n])
		}
	}()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, opts, log.WithField("component", "main")) }()

	timeout := time.After(30 * time.Second)
	next := func() string {
		t.Helper()
		select {
		case m, ok := <-msgs:
			if !ok {
				t.Fatal("notify socket closed")
			}
			return m
		case err := <-done:
			t.Fatalf("run ended early: %v", err)
		case <-timeout:
			t.Fatal("timed out waiting for sd_notify")
		}
		return ""
	}
	if m := next(); m != "READY=1" {
		t.Fatalf("first message %q, want READY=1", m)
	}
	if m := next(); m != "STATUS=serving" {
		t.Fatalf("second message %q, want STATUS=serving (nothing degraded)", m)
	}
	if m := next(); m != "WATCHDOG=1" {
		t.Fatalf("third message %q, want WATCHDOG=1", m)
	}
	cancel()
	// run may return before the reader has taken the last datagrams: wait
	// for it, then read what was sent (datagrams stay queued on the socket).
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-timeout:
		t.Fatal("run did not return after cancel")
	}
	for {
		var m string
		select {
		case m = <-msgs:
		case <-time.After(5 * time.Second):
			t.Fatal("no STOPPING=1 after run returned")
		}
		if m == "STOPPING=1" {
			break
		}
		if m != "WATCHDOG=1" {
			t.Fatalf("message %q before STOPPING=1", m)
		}
	}
	// Nothing after STOPPING=1.
	select {
	case m := <-msgs:
		t.Errorf("message %q after STOPPING=1", m)
	case <-time.After(200 * time.Millisecond):
	}
}

func TestNotifierWatchdogRateLimit(t *testing.T) {
	dir := t.TempDir()
	sockPath := filepath.Join(dir, "n.sock")
	if len(sockPath) > 100 {
		d, err := os.MkdirTemp("", "cgn")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(d) })
		sockPath = filepath.Join(d, "n.sock")
	}
	sock, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sockPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	t.Setenv("NOTIFY_SOCKET", sockPath)
	t.Setenv("WATCHDOG_USEC", "10000000") // 10s: pings at most every 5s
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	log := logrus.New()
	log.SetOutput(io.Discard)
	n := newNotifier(log.WithField("component", "systemd"))
	now := time.Unix(1000, 0)
	n.now = func() time.Time { return now }

	steps := []struct {
		name    string
		advance time.Duration
		action  func()
		want    string // "" = nothing sent
	}{
		{"no ping before ready", 0, n.watchdog, ""},
		{"ready", 0, n.Ready, "READY=1"},
		{"first ping", 0, n.watchdog, "WATCHDOG=1"},
		{"too soon", 4 * time.Second, n.watchdog, ""},
		{"half interval passed", time.Second, n.watchdog, "WATCHDOG=1"},
		{"stopping", 10 * time.Second, n.Stopping, "STOPPING=1"},
		{"no ping while stopping", 10 * time.Second, n.watchdog, ""},
	}
	buf := make([]byte, 256)
	for _, s := range steps {
		now = now.Add(s.advance)
		s.action()
		// Sends are synchronous datagrams: whatever was sent is queued now.
		_ = sock.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		got := ""
		if k, err := sock.Read(buf); err == nil {
			got = string(buf[:k])
		}
		if got != s.want {
			t.Errorf("%s: got %q, want %q", s.name, got, s.want)
		}
	}
	if n.watchdogInterval() != 10*time.Second {
		t.Errorf("watchdog interval %v", n.watchdogInterval())
	}
}
