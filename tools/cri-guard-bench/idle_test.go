package main

import (
	"os"
	"testing"
)

// TestReadThreadStats reads this test process's own threads: some on-CPU
// time, and the context switches of its threads.
func TestReadThreadStats(t *testing.T) {
	before, err := readThreadStats(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for i := range 5_000_000 {
		x += i
	}
	_ = x
	after, err := readThreadStats(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after.onCPU <= before.onCPU {
		t.Errorf("on-CPU time did not grow over a busy loop: %v then %v", before.onCPU, after.onCPU)
	}
	if after.switches < before.switches || after.switches == 0 {
		t.Errorf("context switches %d then %d", before.switches, after.switches)
	}
	if _, err := readThreadStats(1 << 30); err == nil {
		t.Error("no error for a pid that does not exist")
	}
}
