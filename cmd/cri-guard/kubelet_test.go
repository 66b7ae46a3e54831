package main

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// TestKubeletStarts: each kubelet process connecting for the first time is
// a start, the first one seen included; the same process again (its
// connections closed for idleness) and other processes (crictl, a process
// gone before it was read) are not.
func TestKubeletStarts(t *testing.T) {
	root := t.TempDir()
	comm := map[int32]string{10: "kubelet", 11: "crictl", 12: "kubelet", 13: "kubelet-wrapper"}
	for pid, name := range comm {
		dir := filepath.Join(root, strconv.Itoa(int(pid)))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "comm"), []byte(name+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name   string
		pids   []int32
		starts int
	}{
		{"the first kubelet", []int32{10}, 1},
		{"its connections again", []int32{10, 10, 10}, 1},
		{"other processes", []int32{11, 13, 99}, 0},
		{"a restart", []int32{10, 11, 10, 12, 12}, 2},
		{"back and forth", []int32{10, 12, 10}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := 0
			k := &kubeletStarts{procRoot: root, started: func() { n++ }, log: logrus.NewEntry(logrus.New())}
			for _, pid := range tt.pids {
				k.connected(pid)
			}
			if n != tt.starts {
				t.Fatalf("%d starts, want %d", n, tt.starts)
			}
		})
	}
}

// TestKubeletStops: the kubelet last seen whose last connection closes is
// told exited once its process is gone or a zombie (looked at a few times:
// an exit closes the sockets before /proc shows it), once; a kubelet that
// lives on (idle connections closed), another process, or an older kubelet
// after a new one connected are not.
func TestKubeletStops(t *testing.T) {
	root := t.TempDir()
	proc := func(pid int32, comm, state string) {
		dir := filepath.Join(root, strconv.Itoa(int(pid)))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "comm"), []byte(comm+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		stat := strconv.Itoa(int(pid)) + " (" + comm + ") " + state + " 1 1 1 0 -1"
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stops := make(chan struct{}, 10)
	k := &kubeletStarts{procRoot: root, started: func() {}, stopped: func() { stops <- struct{}{} },
		log: logrus.NewEntry(logrus.New()), exitChecks: []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond}}
	told := func(want int, what string) {
		t.Helper()
		time.Sleep(100 * time.Millisecond) // past every check
		if n := len(stops); n != want {
			t.Fatalf("%s: told %d exits, want %d", what, n, want)
		}
	}
	proc(10, "kubelet", "S")
	proc(11, "crictl", "S")
	k.connected(10)
	k.disconnected(10)
	told(0, "a kubelet living on")
	k.connected(11)
	k.disconnected(11)
	told(0, "another process")
	proc(10, "kubelet", "Z")
	k.disconnected(10)
	told(1, "a zombie kubelet")
	k.disconnected(10)
	told(1, "the same exit again")
	proc(12, "kubelet", "S")
	k.connected(12)
	if err := os.RemoveAll(filepath.Join(root, "12")); err != nil {
		t.Fatal(err)
	}
	k.disconnected(12)
	told(2, "a kubelet gone from /proc")
	proc(13, "kubelet", "S")
	proc(14, "kubelet", "S")
	k.connected(13)
	k.connected(14) // a new kubelet before the old one's connections closed
	proc(13, "kubelet", "Z")
	k.disconnected(13)
	told(2, "an older kubelet after a new one connected")
	proc(14, "sleep", "S") // its pid reused by another program
	k.disconnected(14)
	told(3, "a pid reused")
}
