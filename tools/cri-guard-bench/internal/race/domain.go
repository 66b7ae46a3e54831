package race

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/benchutil"
)

// Domain is the pods' memory cgroup of the race: the cgroup with the
// memory limit that the kubelet's enforceNodeAllocatable [pods] sets, in
// the hierarchy that holds the memory controller (v1 here, v2 on unified
// hosts).
type Domain struct {
	Group string // cgroup path from the root, e.g. /cri-guard-rt-pods/race-123
	root  string // mount point of the memory hierarchy
	dir   string // directory in the memory hierarchy
	v2    bool
	limit int64
	buf   []byte
}

// memoryHierarchy returns the mount point of the hierarchy holding the
// memory controller and whether it is cgroup2.
func memoryHierarchy() (string, bool, error) {
	if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && bytes.Contains(b, []byte("memory")) {
		return "/sys/fs/cgroup", true, nil
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.usage_in_bytes"); err == nil {
		return "/sys/fs/cgroup/memory", false, nil
	}
	return "", false, errors.New("no memory controller: neither cgroup2 with memory nor /sys/fs/cgroup/memory")
}

// NewDomain creates the cgroup and sets its memory limit.
func NewDomain(group string, limit int64) (*Domain, error) {
	root, v2, err := memoryHierarchy()
	if err != nil {
		return nil, err
	}
	d := &Domain{Group: group, root: root, dir: filepath.Join(root, group), v2: v2, limit: limit, buf: make([]byte, 8192)}
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		return nil, fmt.Errorf("create domain cgroup: %w", err)
	}
	if v2 {
		// the parents must delegate memory to their children
		for p := filepath.Dir(d.dir); len(p) > len(root); p = filepath.Dir(p) {
			_ = os.WriteFile(filepath.Join(p, "cgroup.subtree_control"), []byte("+memory"), 0)
		}
		_ = os.WriteFile(filepath.Join(d.dir, "cgroup.subtree_control"), []byte("+memory"), 0)
		err = os.WriteFile(filepath.Join(d.dir, "memory.max"), []byte(strconv.FormatInt(limit, 10)), 0)
	} else {
		err = os.WriteFile(filepath.Join(d.dir, "memory.limit_in_bytes"), []byte(strconv.FormatInt(limit, 10)), 0)
	}
	if err != nil {
		return nil, fmt.Errorf("set domain memory limit: %w", err)
	}
	return d, nil
}

func (d *Domain) read(name string) ([]byte, error) {
	f, err := os.Open(filepath.Join(d.dir, name))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, err := f.Read(d.buf)
	if err != nil {
		return nil, err
	}
	return d.buf[:n], nil
}

// workingSet is usage − inactive file pages, as the kubelet and cri-guard
// compute allocatableMemory.available from it.
func (d *Domain) workingSet() (usage, ws int64, err error) {
	cur, stat, inactiveKey := "memory.usage_in_bytes", "memory.stat", "total_inactive_file"
	if d.v2 {
		cur, inactiveKey = "memory.current", "inactive_file"
	}
	b, err := d.read(cur)
	if err != nil {
		return 0, 0, err
	}
	usage, err = strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("parse %s: %w", cur, err)
	}
	b, err = d.read(stat)
	if err != nil {
		return 0, 0, err
	}
	inactive, _ := statKey(b, inactiveKey)
	return usage, max(usage-inactive, 0), nil
}

// oomKills is the domain's OOM kill count (v1 memory.oom_control oom_kill,
// v2 memory.events oom_kill).
func (d *Domain) oomKills() (int64, error) { return oomKillsIn(d.dir, d.v2, d.buf) }

func oomKillsIn(dir string, v2 bool, buf []byte) (int64, error) {
	name := "memory.oom_control"
	if v2 {
		name = "memory.events"
	}
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := f.Read(buf)
	if err != nil {
		return 0, err
	}
	v, ok := statKey(buf[:n], "oom_kill")
	if !ok {
		return 0, fmt.Errorf("%s of %q: no oom_kill (kernel older than 4.13?)", name, dir)
	}
	return v, nil
}

// resetPeak clears the peak usage (v1 memory.max_usage_in_bytes); v2 has
// memory.peak only from 5.19 and no reset before 6.x: the race tracks the
// peak of its own samples too.
func (d *Domain) resetPeak() {
	if !d.v2 {
		_ = os.WriteFile(filepath.Join(d.dir, "memory.max_usage_in_bytes"), []byte("0"), 0)
	}
}

// peak is the domain's peak usage since resetPeak, 0 when unknown.
func (d *Domain) peak() int64 {
	name := "memory.max_usage_in_bytes"
	if d.v2 {
		name = "memory.peak"
	}
	b, err := d.read(name)
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	return v
}

// Remove removes the domain's cgroups in every hierarchy, bottom-up.
func (d *Domain) Remove() error {
	var errs []error
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", d.Group))
	if d.v2 {
		dirs = []string{d.dir}
	}
	for _, dir := range dirs {
		if _, err := os.Stat(dir); err == nil {
			errs = append(errs, benchutil.RemoveCgroupTree(dir))
		}
	}
	return errors.Join(errs...)
}

// statKey finds "key value" in a flat-keyed cgroup file.
func statKey(b []byte, key string) (int64, bool) {
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		k, v, ok := bytes.Cut(line, []byte(" "))
		if ok && string(k) == key {
			n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
