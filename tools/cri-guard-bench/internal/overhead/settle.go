package overhead

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// settle waits until the machine's CPUs are mostly idle (busy share under
// maxBusy over one interval), at most maxWait: creating the workload
// leaves containerd and its shims busy for a while, and a latency phase
// started then measures that aftermath, on both sides, rather than the hop.
// It returns how long it waited and the last busy share seen.
func settle(ctx context.Context, interval, maxWait time.Duration, maxBusy float64) (time.Duration, float64, error) {
	start := time.Now()
	prev, err := readCPUTimes()
	if err != nil {
		return 0, 0, err
	}
	for {
		select {
		case <-ctx.Done():
			return time.Since(start), 0, ctx.Err()
		case <-time.After(interval):
		}
		cur, err := readCPUTimes()
		if err != nil {
			return time.Since(start), 0, err
		}
		busy := cur.busyShareSince(prev)
		prev = cur
		if busy < maxBusy || time.Since(start) >= maxWait {
			return time.Since(start), busy, nil
		}
	}
}

// cpuTimes are the aggregate counters of /proc/stat's "cpu" line, in ticks.
type cpuTimes struct{ idle, total uint64 }

func (c cpuTimes) busyShareSince(prev cpuTimes) float64 {
	dt := c.total - prev.total
	if dt == 0 || c.total < prev.total {
		return 0
	}
	return 1 - float64(c.idle-prev.idle)/float64(dt)
}

func readCPUTimes() (cpuTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, fmt.Errorf("read /proc/stat: %w", err)
	}
	return parseCPUTimes(string(b))
}

// parseCPUTimes reads the first line, "cpu user nice system idle iowait irq
// softirq steal ...": idle is idle + iowait, total the sum of the first
// eight (guest time is already in user).
func parseCPUTimes(stat string) (cpuTimes, error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return cpuTimes{}, fmt.Errorf("parse /proc/stat: unexpected first line %q", line)
	}
	var c cpuTimes
	for i, s := range f[1:9] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("parse /proc/stat: field %d: %w", i+1, err)
		}
		c.total += v
		if i == 3 || i == 4 {
			c.idle += v
		}
	}
	return c, nil
}
