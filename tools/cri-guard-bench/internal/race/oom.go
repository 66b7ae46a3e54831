package race

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// oomKill is one OOM kill the kernel logged ("oom-kill:" line of
// /dev/kmsg, printed by dump_oom_summary for every kill).
type oomKill struct {
	// at is the kernel's timestamp of the record (since boot).
	at time.Duration
	// memcg is the cgroup whose limit was hit (oom_memcg); taskMemcg the
	// victim's own cgroup. Both are paths in the memory hierarchy.
	memcg, taskMemcg string
	task             string
	pid              int
}

// oomWatch follows the kernel log for OOM kills. It is how the race tells
// an OOM kill reliably: on cgroup v1 the kernel counts oom_kill (memory.
// oom_control) only in the victim's own memory cgroup, not in its parents
// (memcg_memory_event stops propagating unless the memory controller is on
// the default hierarchy), and that cgroup is removed with the container
// soon after; so the domain's counter stays 0 on a v1 host while its pods
// are OOM-killed.
type oomWatch struct {
	f      *os.File
	mu     sync.Mutex
	kills  []oomKill
	lost   int // times records were overwritten before they were read
	err    error
	closed chan struct{}
}

// watchOOM opens /dev/kmsg at its end and follows it.
func watchOOM() (*oomWatch, error) {
	f, err := os.Open("/dev/kmsg")
	if err != nil {
		return nil, fmt.Errorf("follow the kernel log for OOM kills: %w", err)
	}
	// f.Seek, not a syscall on f.Fd(): Fd would put the descriptor in
	// blocking mode, and close could then not end the follower's read
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		f.Close()
		return nil, fmt.Errorf("seek /dev/kmsg: %w", err)
	}
	w := &oomWatch{f: f, closed: make(chan struct{})}
	go w.follow()
	return w, nil
}

func (w *oomWatch) follow() {
	defer close(w.closed)
	buf := make([]byte, 8192) // one record per read
	for {
		n, err := w.f.Read(buf)
		if errors.Is(err, unix.EPIPE) {
			// records overwritten before they were read: a kill may be
			// among them, so every run from here on is in doubt
			w.mu.Lock()
			w.lost++
			w.mu.Unlock()
			continue
		}
		if err != nil {
			w.mu.Lock()
			if !errors.Is(err, os.ErrClosed) {
				w.err = fmt.Errorf("follow the kernel log: %w", err)
			}
			w.mu.Unlock()
			return
		}
		if k, ok := parseKmsgOOM(string(buf[:n])); ok {
			w.mu.Lock()
			w.kills = append(w.kills, k)
			w.mu.Unlock()
		}
	}
}

// parseKmsgOOM parses a /dev/kmsg record "PRI,SEQ,TS,FLAGS;MESSAGE" whose
// message is the kernel's "oom-kill:constraint=...,oom_memcg=...,
// task_memcg=...,task=...,pid=...,uid=..." line.
func parseKmsgOOM(rec string) (oomKill, bool) {
	head, msg, ok := strings.Cut(rec, ";")
	if !ok {
		return oomKill{}, false
	}
	msg, _, _ = strings.Cut(msg, "\n")
	fields, ok := strings.CutPrefix(msg, "oom-kill:")
	if !ok {
		return oomKill{}, false
	}
	var k oomKill
	if h := strings.Split(head, ","); len(h) >= 3 {
		if us, err := strconv.ParseInt(h[2], 10, 64); err == nil {
			k.at = time.Duration(us) * time.Microsecond
		}
	}
	for f := range strings.SplitSeq(fields, ",") {
		key, v, _ := strings.Cut(f, "=")
		switch key {
		case "oom_memcg":
			k.memcg = v
		case "task_memcg":
			k.taskMemcg = v
		case "task":
			k.task = v
		case "pid":
			k.pid, _ = strconv.Atoi(v)
		}
	}
	return k, k.taskMemcg != ""
}

// count is the number of kills seen so far, and of gaps (records
// overwritten before they were read).
func (w *oomWatch) count() (kills, gaps int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.kills), w.lost
}

// in returns the kills after the first n whose victim was in group (a
// cgroup path, e.g. the domain's) or below it, and the watch's error, or a
// gap in the records after the first gaps.
func (w *oomWatch) in(n, gaps int, group string) ([]oomKill, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil && w.lost > gaps {
		return nil, errors.New("kernel log records were overwritten before they were read: an OOM kill may be among them")
	}
	var out []oomKill
	for _, k := range w.kills[min(n, len(w.kills)):] {
		if k.taskMemcg == group || strings.HasPrefix(k.taskMemcg, group+"/") {
			out = append(out, k)
		}
	}
	return out, w.err
}

func (w *oomWatch) close() {
	w.f.Close()
	<-w.closed
}
