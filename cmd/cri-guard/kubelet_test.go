package main

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

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
