package pressure

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
)

// v1Unlimited is the smallest value treated as "no limit" in a cgroup v1
// memory.limit_in_bytes or memory.soft_limit_in_bytes (the kernel reports
// PAGE_COUNTER_MAX pages, 9223372036854771712 on 4 KiB pages).
const v1Unlimited = 1 << 62

// groupMemory is what the sampler reads from one cgroup's memory files.
type groupMemory struct {
	UsageBytes        int64
	InactiveFileBytes int64
	// LimitBytes is the hard limit; 0 with HasLimit false means unlimited.
	LimitBytes int64
	HasLimit   bool
	// RequestBytes is memory.min, else memory.low (v2), or the soft limit (v1).
	RequestBytes int64
	HasRequest   bool
}

// workingSetBytes is usage minus inactive file pages, never negative (the
// kubelet's and cAdvisor's working set).
func (g groupMemory) workingSetBytes() int64 {
	if g.InactiveFileBytes >= g.UsageBytes {
		return 0
	}
	return g.UsageBytes - g.InactiveFileBytes
}

// readMemoryV2 reads memory.current, memory.stat (inactive_file) and
// memory.max of a cgroup v2 group; withRequest also reads memory.min and
// memory.low. A missing memory.current (group absent or memory controller
// not enabled for it) returns an error satisfying errors.Is(fs.ErrNotExist).
func (s *Sampler) readMemoryV2(dir string, withRequest bool) (groupMemory, error) {
	var g groupMemory
	usage, _, err := s.readUintFile(filepath.Join(dir, "memory.current"))
	if err != nil {
		return g, err
	}
	g.UsageBytes = usage
	if g.InactiveFileBytes, err = s.readStatKey(filepath.Join(dir, "memory.stat"), "inactive_file"); err != nil {
		return g, missingIsError(err)
	}
	limit, unlimited, err := s.readUintFile(filepath.Join(dir, "memory.max"))
	if err != nil {
		return g, missingIsError(err)
	}
	g.LimitBytes, g.HasLimit = limit, !unlimited
	if !withRequest {
		return g, nil
	}
	for _, name := range [...]string{"memory.min", "memory.low"} {
		v, _, err := s.readUintFile(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return g, err
		}
		if v > 0 {
			g.RequestBytes, g.HasRequest = v, true
			break
		}
	}
	return g, nil
}

// readMemoryV1 reads memory.usage_in_bytes, memory.stat (total_inactive_file)
// and memory.limit_in_bytes of a cgroup v1 memory group; withRequest also
// reads memory.soft_limit_in_bytes.
func (s *Sampler) readMemoryV1(dir string, withRequest bool) (groupMemory, error) {
	var g groupMemory
	usage, _, err := s.readUintFile(filepath.Join(dir, "memory.usage_in_bytes"))
	if err != nil {
		return g, err
	}
	g.UsageBytes = usage
	if g.InactiveFileBytes, err = s.readStatKey(filepath.Join(dir, "memory.stat"), "total_inactive_file"); err != nil {
		return g, missingIsError(err)
	}
	limit, _, err := s.readUintFile(filepath.Join(dir, "memory.limit_in_bytes"))
	if err != nil {
		return g, missingIsError(err)
	}
	if limit < v1Unlimited {
		g.LimitBytes, g.HasLimit = limit, true
	}
	if !withRequest {
		return g, nil
	}
	soft, _, err := s.readUintFile(filepath.Join(dir, "memory.soft_limit_in_bytes"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return g, err
	case soft > 0 && soft < v1Unlimited:
		g.RequestBytes, g.HasRequest = soft, true
	}
	return g, nil
}

// readGroupMemory reads the memory files of group (a path relative to the
// hierarchy, beginning with "/") from whichever hierarchy holds the memory
// controller. ok is false when the group or its memory files do not exist.
func (s *Sampler) readGroupMemory(group string, withRequest bool) (g groupMemory, ok bool, err error) {
	switch s.layout.memoryVersion {
	case 2:
		g, err = s.readMemoryV2(filepath.Join(s.layout.memoryDir, group), withRequest)
	case 1:
		g, err = s.readMemoryV1(filepath.Join(s.layout.memoryDir, group), withRequest)
	default:
		return g, false, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return groupMemory{}, false, nil
	}
	if err != nil {
		return groupMemory{}, false, err
	}
	return g, true, nil
}

// readGroupPSI reads group's memory.pressure from the unified hierarchy. ok is
// false when there is no unified hierarchy or the file does not exist.
func (s *Sampler) readGroupPSI(group string) (some, full PSI, ok bool, err error) {
	if s.layout.unifiedDir == "" {
		return PSI{}, PSI{}, false, nil
	}
	some, full, err = s.readPSI(filepath.Join(s.layout.unifiedDir, group, "memory.pressure"))
	if errors.Is(err, fs.ErrNotExist) {
		return PSI{}, PSI{}, false, nil
	}
	if err != nil {
		return PSI{}, PSI{}, false, err
	}
	return some, full, true, nil
}

// missingIsError turns a missing secondary file (the group exists, since its
// usage file was read) into a plain error so it is not mistaken for "no stats".
func missingIsError(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("incomplete memory stats: %v", err)
	}
	return err
}
