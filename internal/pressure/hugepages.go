package pressure

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// defaultSysRoot is where sysfs is mounted; a SamplerConfig.SysRoot left
// empty means this.
const defaultSysRoot = "/sys"

// hugePagesDir holds one directory per huge page size the kernel offers
// (hugepages-2048kB, hugepages-1048576kB), relative to the sysfs root. It
// is what cadvisor's machine info reads, and from it the kubelet's node
// capacity hugepages-<size>: nr_hugepages × the size, for every size.
const hugePagesDir = "kernel/mm/hugepages"

// hugePageSize is one huge page pool: its page size and the file holding
// its number of pages.
type hugePageSize struct {
	pageBytes int64
	nrPath    string
}

// listHugePageSizes finds the huge page sizes under sysRoot. The sizes are
// fixed when the kernel boots (default and hugepagesz= sizes), so they are
// listed once; the number of pages of each is read at every sample. A
// kernel without hugetlb has no such directory: no sizes, a pool of 0, as
// cadvisor treats it.
func listHugePageSizes(sysRoot string) ([]hugePageSize, error) {
	dir := filepath.Join(sysRoot, hugePagesDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list huge page sizes: %w", err)
	}
	var sizes []hugePageSize
	for _, e := range entries {
		kb, err := parseHugePageDirName(e.Name())
		if err != nil {
			return nil, fmt.Errorf("list huge page sizes in %q: %w", dir, err)
		}
		sizes = append(sizes, hugePageSize{pageBytes: kb << 10, nrPath: filepath.Join(dir, e.Name(), "nr_hugepages")})
	}
	return sizes, nil
}

// parseHugePageDirName returns the page size in KiB of a directory named
// as the kernel names them ("hugepages-2048kB").
func parseHugePageDirName(name string) (int64, error) {
	num, ok := strings.CutPrefix(name, "hugepages-")
	if ok {
		num, ok = strings.CutSuffix(num, "kB")
	}
	if !ok {
		return 0, fmt.Errorf("unexpected entry %q, want hugepages-<size>kB", name)
	}
	kb, err := strconv.ParseInt(num, 10, 64)
	if err != nil || kb <= 0 || kb > math.MaxInt64>>10 {
		return 0, fmt.Errorf("unexpected entry %q: bad page size", name)
	}
	return kb, nil
}

// readHugePages returns the node's huge page pool in bytes: the sum over
// every size of nr_hugepages × page size. nr_hugepages is the persistent
// pool, pages in use included and surplus pages not, as cadvisor reads it.
func (s *Sampler) readHugePages() (int64, error) {
	var total int64
	for _, sz := range s.hugeSizes {
		b, err := s.r.read(sz.nrPath)
		if err != nil {
			return 0, fmt.Errorf("read huge pages: %w", err)
		}
		n, err := parseUint(bytes.TrimSpace(b))
		if err != nil {
			return 0, fmt.Errorf("parse %q: %w", sz.nrPath, err)
		}
		if n > uint64(math.MaxInt64/sz.pageBytes) || int64(n)*sz.pageBytes > math.MaxInt64-total {
			return 0, fmt.Errorf("parse %q: %d pages out of range", sz.nrPath, n)
		}
		total += int64(n) * sz.pageBytes
	}
	return total, nil
}

// subtractHugePages is memory.available as the kubelet computes it from
// 1.37 (HugepageAwareEviction, pkg/kubelet/server/stats adjustForHugePages):
// the huge page pool is RAM that MemTotal counts and the working set never
// does, so it is taken off what is available, down to 0 and no further.
func subtractHugePages(available, pool int64) int64 {
	if available > pool {
		return available - pool
	}
	return 0
}
