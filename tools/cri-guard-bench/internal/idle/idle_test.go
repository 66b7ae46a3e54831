package idle

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
	// A running thread's schedstat moves at the scheduler's ticks and
	// switches, not at every read: spin until it has moved, up to a bound
	// of work far past any tick (a 2 ms loop ran between two ticks once).
	var after threadStats
	x := 0
	for round := 0; ; round++ {
		for i := range 5_000_000 {
			x += i
		}
		if after, err = readThreadStats(os.Getpid()); err != nil {
			t.Fatal(err)
		}
		if after.onCPU > before.onCPU {
			break
		}
		if round == 1000 {
			t.Fatalf("on-CPU time did not grow over %d busy loops: %v then %v", round+1, before.onCPU, after.onCPU)
		}
	}
	_ = x
	if after.switches < before.switches || after.switches == 0 {
		t.Errorf("context switches %d then %d", before.switches, after.switches)
	}
	if _, err := readThreadStats(1 << 30); err == nil {
		t.Error("no error for a pid that does not exist")
	}
}
