package benchutil

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ProcStats are a process's CPU time and resident memory.
type ProcStats struct {
	CPU    time.Duration // user + system, all threads
	RSSKiB int64
	HWMKiB int64 // VmHWM: the peak of VmRSS
}

// ReadProcStats reads /proc/<pid>/stat (utime, stime in clock ticks, 100 Hz
// on Linux) and VmRSS and VmHWM from /proc/<pid>/status.
func ReadProcStats(pid int) (ProcStats, error) {
	var ps ProcStats
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ps, fmt.Errorf("read stat of pid %d: %w", pid, err)
	}
	// Fields after the command name, which is in parentheses.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(fields) < 13 {
		return ps, fmt.Errorf("parse stat of pid %d: %d fields", pid, len(fields))
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return ps, fmt.Errorf("parse stat of pid %d: bad utime/stime", pid)
	}
	const ticksPerSecond = 100
	ps.CPU = time.Duration(utime+stime) * time.Second / ticksPerSecond

	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ps, fmt.Errorf("read status of pid %d: %w", pid, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		for key, dst := range map[string]*int64{"VmRSS:": &ps.RSSKiB, "VmHWM:": &ps.HWMKiB} {
			if v, ok := strings.CutPrefix(sc.Text(), key); ok {
				*dst, err = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				if err != nil {
					return ps, fmt.Errorf("parse %s of pid %d: %w", key, pid, err)
				}
			}
		}
	}
	return ps, sc.Err()
}
