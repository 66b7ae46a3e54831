package pressure

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"
)

// Sources a NodeSample's memory figures come from.
const (
	// SourceCgroupV2 means the root cgroup's memory.stat (and memory.current
	// when the kernel has it at the root, else MemTotal - MemFree as runc
	// computes root usage) under a unified hierarchy with the memory
	// controller.
	SourceCgroupV2 = "cgroupv2"
	// SourceMeminfo means /proc/meminfo alone: the working set is
	// MemTotal - MemAvailable. Used on hybrid and v1 hosts, where the unified
	// hierarchy has no memory controller.
	SourceMeminfo = "meminfo"
)

// ErrNoStats reports that no stats exist for a cgroup: neither memory files
// nor a pressure file. It is a distinct state, not zero usage.
var ErrNoStats = errors.New("no stats")

// SamplerConfig locates the stats a Sampler reads.
type SamplerConfig struct {
	// CgroupRoot is where cgroups are mounted; default /sys/fs/cgroup.
	CgroupRoot string
	// ProcRoot is where proc is mounted; default /proc.
	ProcRoot string
	// PodsCgroup is the cgroup holding all pods (e.g. "/kubepods.slice" or
	// "kubepods"), relative to the root. Empty: no allocatable signal and
	// PSI signals come from the node.
	PodsCgroup string
	// SysRoot is where sysfs is mounted; default /sys. The huge page pool
	// is read from <SysRoot>/kernel/mm/hugepages.
	SysRoot string
	// SubtractHugePages takes the huge page pool off memory.available (and
	// so off the capacity its percentages refer to), as the kubelet does
	// from 1.37 (HugepageAwareEviction, beta and on by default there);
	// false computes it as the kubelet up to 1.36. allocatableMemory.available
	// is computed the same either way, as in the kubelet.
	SubtractHugePages bool
	// Now is the clock stamping samples; default time.Now.
	Now func() time.Time
}

// NodeSample is one reading of node-level memory stats.
type NodeSample struct {
	// Time is when the sample was taken.
	Time time.Time
	// Source is SourceCgroupV2 or SourceMeminfo.
	Source string
	// CapacityBytes is MemTotal.
	CapacityBytes int64
	// WorkingSetBytes is usage - inactive_file (or MemTotal - MemAvailable);
	// with HugePagesSubtracted, less the huge page pool where it counts
	// the pool (every source but a root memory.current), as the kubelet's
	// working set never does.
	WorkingSetBytes int64
	// AvailableBytes is memory.available: CapacityBytes - WorkingSetBytes,
	// and with HugePagesSubtracted less HugePagesBytes, down to 0 at most.
	// Where the working set counted the pool, the pool was already out of
	// it before, so that only the capacity its percentages refer to moves.
	AvailableBytes int64
	// HugePagesBytes is the node's huge page pool (every size's
	// nr_hugepages × page size: the kubelet's hugepages-<size> capacity);
	// with HugePagesError set, the last pool read.
	HugePagesBytes int64
	// HugePagesSubtracted reports that AvailableBytes had the pool taken
	// off (SamplerConfig.SubtractHugePages and a pool larger than 0).
	HugePagesSubtracted bool
	// HugePagesError is set when the pool could not be read this time; the
	// last pool read stands, as the kubelet keeps its last machine info.
	HugePagesError error
	// HasPSI reports whether Some and Full were read (PSI may be disabled).
	HasPSI bool
	// Some and Full are the node's memory PSI.
	Some, Full PSI
	// HasAllocatable reports whether the pods cgroup's memory was read.
	HasAllocatable bool
	// AllocatableCapacityBytes is the pods cgroup's limit, or CapacityBytes
	// when it has none (or a larger one).
	AllocatableCapacityBytes int64
	// AllocatableAvailableBytes is AllocatableCapacityBytes minus the pods
	// cgroup's working set (allocatableMemory.available).
	AllocatableAvailableBytes int64
	// AllocatableInactiveFileBytes is the pods cgroup's inactive_file
	// (v1: total_inactive_file): what its usage holds beyond the working
	// set, from which a memcg notifier's usage level follows (Relevel).
	AllocatableInactiveFileBytes int64
	// PodsSome and PodsFull are the pods cgroup's memory PSI, nil when no
	// pods cgroup is configured or its pressure file cannot be read.
	PodsSome, PodsFull *PSI
	// PSIError is set when the node's pressure file exists but cannot be
	// read or parsed: the PSI signals are missing from this sample, the
	// memory signals stand on their own.
	PSIError error
	// PodsError is set when a pods cgroup is configured but could not be
	// read completely; the node figures are still valid.
	PodsError error
}

// PodStats is one reading of a pod cgroup.
type PodStats struct {
	// HasMemory reports whether memory figures were read.
	HasMemory bool
	// WorkingSetBytes is usage - inactive file pages.
	WorkingSetBytes int64
	// UsageBytes is memory.current (v2) or memory.usage_in_bytes (v1).
	UsageBytes int64
	// HasRequest reports whether RequestBytes is known.
	HasRequest bool
	// RequestBytes is memory.min, else memory.low (v2), or
	// memory.soft_limit_in_bytes (v1), when set.
	RequestBytes int64
	// HasPSI reports whether Some and Full were read.
	HasPSI bool
	// Some and Full are the pod cgroup's memory PSI.
	Some, Full PSI
}

// layout is where the sampler finds each kind of file.
type layout struct {
	source        string
	memoryVersion int    // 2, 1 or 0 (no memory controller found)
	memoryDir     string // mount point of the hierarchy with memory
	unifiedDir    string // mount point of cgroup2, "" if none
}

// Where the host's cgroup filesystems and proc are mounted; a SamplerConfig
// root left empty means these.
const (
	DefaultCgroupRoot = "/sys/fs/cgroup"
	DefaultProcRoot   = "/proc"
)

// Sampler reads node and pod memory stats. It is safe for concurrent use;
// reads are serialised so that one buffer serves them all.
type Sampler struct {
	cfg        SamplerConfig
	layout     layout
	podsGroup  string
	meminfo    string
	procPSI    string
	rootCur    string
	rootStat   string
	rootPSI    string
	hugeSizes  []hugePageSize
	mu         sync.Mutex
	r          fileReader
	hasRootCur bool
	// wsHoldsPool: the node working set counts the huge page pool (it is
	// MemTotal − MemAvailable, or MemTotal − MemFree − inactive_file: the
	// kernel takes the pool out of free memory), which the kubelet's
	// (memcg usage − inactive_file) never does.
	wsHoldsPool bool
	// hugeBytes is the last huge page pool read.
	hugeBytes int64
	// fresh PSI averages of the node and of the pods cgroup (see psiAverage).
	nodeSome, nodeFull, podsSome, podsFull psiAverage
}

// NewSampler detects the cgroup layout under cfg.CgroupRoot and checks that
// meminfo and the huge page pool can be read.
func NewSampler(cfg SamplerConfig) (*Sampler, error) {
	if cfg.CgroupRoot == "" {
		cfg.CgroupRoot = DefaultCgroupRoot
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = DefaultProcRoot
	}
	if cfg.SysRoot == "" {
		cfg.SysRoot = defaultSysRoot
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Sampler{
		cfg:     cfg,
		meminfo: filepath.Join(cfg.ProcRoot, "meminfo"),
		procPSI: filepath.Join(cfg.ProcRoot, "pressure", "memory"),
	}
	if cfg.PodsCgroup != "" {
		g, err := CgroupPath(cfg.PodsCgroup)
		if err != nil {
			return nil, fmt.Errorf("pods cgroup: %w", err)
		}
		s.podsGroup = g
	}
	l, err := detectLayout(cfg.CgroupRoot)
	if err != nil {
		return nil, err
	}
	s.layout = l
	if l.unifiedDir != "" {
		s.rootPSI = filepath.Join(l.unifiedDir, "memory.pressure")
	}
	if l.memoryVersion == 2 {
		s.rootCur = filepath.Join(l.memoryDir, "memory.current")
		s.rootStat = filepath.Join(l.memoryDir, "memory.stat")
		_, err := os.Stat(s.rootCur)
		s.hasRootCur = err == nil
	}
	s.wsHoldsPool = !s.hasRootCur
	if _, err := s.readMeminfo(); err != nil {
		return nil, err
	}
	if s.hugeSizes, err = listHugePageSizes(cfg.SysRoot); err != nil {
		return nil, err
	}
	if s.hugeBytes, err = s.readHugePages(); err != nil {
		return nil, err
	}
	return s, nil
}

// MemoryCgroup says where the pods' memory is accounted, for a killer
// past the runtime (podkill.New): the mount point of the hierarchy that
// holds the memory controller, its version (2, 1, or 0 when none was
// found), and the pods cgroup's path in it ("" when none is configured).
func (s *Sampler) MemoryCgroup() (dir string, version int, podsGroup string) {
	return s.layout.memoryDir, s.layout.memoryVersion, s.podsGroup
}

// detectLayout finds the unified hierarchy and the hierarchy holding the
// memory controller. The unified root's controllers are read through
// cgroups/v3 cgroup2.
func detectLayout(root string) (layout, error) {
	for _, unified := range []string{root, filepath.Join(root, "unified")} {
		m, err := cgroup2.Load("/", cgroup2.WithMountpoint(unified))
		if err != nil {
			return layout{}, fmt.Errorf("load cgroup2 %q: %w", unified, err)
		}
		ctrls, err := m.RootControllers()
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return layout{}, fmt.Errorf("read controllers %q: %w", unified, err)
		}
		l := layout{source: SourceMeminfo, unifiedDir: unified}
		if slices.Contains(ctrls, "memory") {
			l.source, l.memoryVersion, l.memoryDir = SourceCgroupV2, 2, unified
			return l, nil
		}
		if v1, ok := v1MemoryDir(root); ok {
			l.memoryVersion, l.memoryDir = 1, v1
		}
		return l, nil
	}
	l := layout{source: SourceMeminfo}
	if v1, ok := v1MemoryDir(root); ok {
		l.memoryVersion, l.memoryDir = 1, v1
	}
	return l, nil
}

// v1MemoryDir returns the cgroup v1 memory hierarchy under root, if any.
func v1MemoryDir(root string) (string, bool) {
	dir := filepath.Join(root, "memory")
	if _, err := os.Stat(filepath.Join(dir, "memory.usage_in_bytes")); err != nil {
		return "", false
	}
	return dir, true
}

// Source reports where node memory figures come from (SourceCgroupV2 or
// SourceMeminfo) and which hierarchy version holds pod memory stats (2, 1,
// or 0 when none was found).
func (s *Sampler) Source() (source string, podMemoryVersion int) {
	return s.layout.source, s.layout.memoryVersion
}

// Node takes one node sample.
func (s *Sampler) Node() (NodeSample, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := NodeSample{Time: s.cfg.Now(), Source: s.layout.source}
	mi, err := s.readMeminfo()
	if err != nil {
		return NodeSample{}, fmt.Errorf("sample node: %w", err)
	}
	n.CapacityBytes = mi.TotalBytes
	if s.layout.memoryVersion == 2 {
		ws, err := s.rootWorkingSetV2(mi)
		if err != nil {
			return NodeSample{}, fmt.Errorf("sample node: %w", err)
		}
		n.WorkingSetBytes = ws
	} else {
		n.WorkingSetBytes = max(mi.TotalBytes-mi.AvailableBytes, 0)
	}
	n.AvailableBytes = n.CapacityBytes - n.WorkingSetBytes
	if pool, err := s.readHugePages(); err != nil {
		n.HugePagesError = err
	} else {
		s.hugeBytes = pool
	}
	n.HugePagesBytes = s.hugeBytes
	if s.cfg.SubtractHugePages && n.HugePagesBytes > 0 {
		if s.wsHoldsPool {
			// the kubelet's working set has no huge pages in it
			n.WorkingSetBytes = max(n.WorkingSetBytes-n.HugePagesBytes, 0)
		}
		n.AvailableBytes = subtractHugePages(n.CapacityBytes-n.WorkingSetBytes, n.HugePagesBytes)
		n.HugePagesSubtracted = true
	}

	n.Some, n.Full, err = s.readPSI(s.procPSI)
	if errors.Is(err, fs.ErrNotExist) && s.rootPSI != "" {
		n.Some, n.Full, err = s.readPSI(s.rootPSI)
	}
	switch {
	case err == nil:
		n.HasPSI = true
		n.Some = s.nodeSome.update(n.Some, n.Time)
		n.Full = s.nodeFull.update(n.Full, n.Time)
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, unix.EOPNOTSUPP):
		// PSI disabled (psi=0): no PSI signals, not an error.
	default:
		// each signal stands or fails on its own: a broken pressure
		// file loses the PSI signals, not memory.available
		n.PSIError = fmt.Errorf("sample node psi: %w", err)
	}
	if s.podsGroup != "" {
		n.PodsError = s.samplePods(&n)
	}
	return n, nil
}

// rootWorkingSetV2 computes the root cgroup's working set.
func (s *Sampler) rootWorkingSetV2(mi meminfo) (int64, error) {
	usage := mi.TotalBytes - mi.FreeBytes
	if s.hasRootCur {
		u, _, err := s.readUintFile(s.rootCur)
		if err != nil {
			return 0, err
		}
		usage = u
	}
	inactive, err := s.readStatKey(s.rootStat, "inactive_file")
	if err != nil {
		return 0, err
	}
	return groupMemory{UsageBytes: usage, InactiveFileBytes: inactive}.workingSetBytes(), nil
}

// samplePods fills the allocatable and pods PSI fields of n.
func (s *Sampler) samplePods(n *NodeSample) error {
	var errs []error
	g, ok, err := s.readGroupMemory(s.podsGroup, false)
	switch {
	case err != nil:
		errs = append(errs, err)
	case !ok:
		errs = append(errs, fmt.Errorf("pods cgroup %q memory: %w", s.podsGroup, ErrNoStats))
	default:
		capacity := n.CapacityBytes
		if g.HasLimit && g.LimitBytes < capacity {
			capacity = g.LimitBytes
		}
		n.HasAllocatable = true
		n.AllocatableCapacityBytes = capacity
		n.AllocatableAvailableBytes = capacity - g.workingSetBytes()
		n.AllocatableInactiveFileBytes = g.InactiveFileBytes
	}
	some, full, ok, err := s.readGroupPSI(s.podsGroup)
	switch {
	case err != nil:
		errs = append(errs, err)
	case ok:
		some, full = s.podsSome.update(some, n.Time), s.podsFull.update(full, n.Time)
		n.PodsSome, n.PodsFull = &some, &full
	case s.layout.unifiedDir != "":
		errs = append(errs, fmt.Errorf("pods cgroup %q pressure: %w", s.podsGroup, ErrNoStats))
	}
	return errors.Join(errs...)
}

// Pod reads the stats of the pod cgroup named by a CRI cgroup parent (see
// CgroupPath). It returns an error wrapping ErrNoStats when the cgroup has
// neither memory files nor a pressure file.
func (s *Sampler) Pod(cgroupParent string) (PodStats, error) {
	group, err := CgroupPath(cgroupParent)
	if err != nil {
		return PodStats{}, fmt.Errorf("sample pod: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var p PodStats
	g, ok, err := s.readGroupMemory(group, true)
	if err != nil {
		return PodStats{}, fmt.Errorf("sample pod %q: %w", cgroupParent, err)
	}
	if ok {
		p.HasMemory = true
		p.UsageBytes = g.UsageBytes
		p.WorkingSetBytes = g.workingSetBytes()
		p.RequestBytes, p.HasRequest = g.RequestBytes, g.HasRequest
	}
	p.Some, p.Full, p.HasPSI, err = s.readGroupPSI(group)
	if err != nil {
		return PodStats{}, fmt.Errorf("sample pod %q: %w", cgroupParent, err)
	}
	if !p.HasMemory && !p.HasPSI {
		return PodStats{}, fmt.Errorf("sample pod %q: %w", cgroupParent, ErrNoStats)
	}
	return p, nil
}
