package podkill

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cri-guard/cri-guard/internal/pressure"
)

// errNotAPodCgroup is returned by KillPod for a cgroup that is not strictly
// under the pods cgroup (or when no pods cgroup is configured): nothing
// else is ever signalled.
var errNotAPodCgroup = errors.New("not a cgroup under the pods cgroup")

// Killer kills pod cgroups' processes in the hierarchy that holds the
// memory controller, where the pods' processes surely are.
type Killer struct {
	memoryDir     string // mount point of the hierarchy with memory
	memoryVersion int    // 2, 1 or 0 (no memory controller found)
	podsGroup     string // the pods cgroup's path in it, "" if none
}

// New returns a Killer for the memory hierarchy mounted at memoryDir, of
// cgroup version memoryVersion (0: none), whose pods cgroup is podsGroup
// ("" when none is configured: then every kill is refused), as
// pressure.Sampler.MemoryCgroup says.
func New(memoryDir string, memoryVersion int, podsGroup string) *Killer {
	return &Killer{memoryDir: memoryDir, memoryVersion: memoryVersion, podsGroup: podsGroup}
}

// KillPod kills every process of a pod cgroup (named by its CRI cgroup
// parent) at once with SIGKILL, past the runtime: the sync loop's grace cut
// when the node is a moment from OOM. containerd takes a few hundred
// milliseconds from StopContainer to a dead process (167 ms on the host the
// OOM race was measured on), in which four runaways at 800 MB/s each use the last
// 200Mi; the kernel kills in microseconds. On cgroup v2 it writes
// cgroup.kill (the kernel kills the whole subtree, forks included); where
// that file is missing (a v2 kernel before 5.14) and on cgroup v1 (the
// memory hierarchy's group, which surely holds them) it walks the group
// and signals every process in cgroup.procs,
// three rounds at most, for processes forked meanwhile. It returns how many
// processes it signalled (-1 with cgroup.kill, which does not say). The
// runtime sees the containers exit and the stop under way completes as
// usual. It refuses a group that is not strictly under the pods cgroup.
func (k *Killer) KillPod(cgroupParent string) (int, error) {
	group, err := pressure.CgroupPath(cgroupParent)
	if err != nil {
		return 0, fmt.Errorf("kill pod: %w", err)
	}
	if k.podsGroup == "" || !strings.HasPrefix(group, strings.TrimSuffix(k.podsGroup, "/")+"/") {
		return 0, fmt.Errorf("kill pod %q: %w %q", cgroupParent, errNotAPodCgroup, k.podsGroup)
	}
	dir := filepath.Join(k.memoryDir, group)
	switch k.memoryVersion {
	case 2:
		err := writeExisting(filepath.Join(dir, "cgroup.kill"), "1")
		if err == nil {
			return -1, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return 0, fmt.Errorf("kill pod %q: %w", cgroupParent, err)
		}
		if _, serr := os.Stat(dir); serr != nil {
			return 0, fmt.Errorf("kill pod %q: %w", cgroupParent, serr)
		}
	case 1:
		// a hybrid host: the processes are surely in the v1 memory group
		// (the unified one may not hold them), so that one is walked
	default:
		return 0, fmt.Errorf("kill pod %q: no memory cgroup hierarchy", cgroupParent)
	}
	return killTree(dir)
}

// killTree signals SIGKILL to every process in dir's cgroup.procs and in
// its descendants', until a round finds none it has not signalled (a
// killed process stays listed until its exit is done), three rounds at
// most.
func killTree(dir string) (int, error) {
	self := os.Getpid()
	signalled := map[int]bool{}
	killed := 0
	for round := 0; round < 3; round++ {
		var pids []int
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if path == dir {
					return err
				}
				return nil // a child cgroup removed meanwhile
			}
			if !d.IsDir() {
				return nil
			}
			b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
			if err != nil {
				return nil
			}
			for _, f := range bytes.Fields(b) {
				if pid, err := strconv.Atoi(string(f)); err == nil && pid > 1 && pid != self && !signalled[pid] {
					pids = append(pids, pid)
				}
			}
			return nil
		})
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && killed > 0 {
				return killed, nil // the runtime removed it: all gone
			}
			return killed, fmt.Errorf("kill pod cgroup %s: %w", dir, err)
		}
		if len(pids) == 0 {
			return killed, nil
		}
		for _, pid := range pids {
			signalled[pid] = true
			if err := unix.Kill(pid, unix.SIGKILL); err == nil {
				killed++
			}
		}
	}
	return killed, nil
}

// writeExisting writes s to a file that must exist (a cgroup's control
// file: never created).
func writeExisting(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	return errors.Join(err, f.Close())
}
