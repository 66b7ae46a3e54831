package fakenode

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// StatsTree is the proc root the children read memory from.
type StatsTree struct {
	Proc, Cgroup string // a child's procRoot and cgroupRoot
}

// memTotal is the fake node's MemTotal.
const memTotal = 16 << 30

// NewStatsTree makes the tree in dir: PSI at zero, 12 GiB of 16 available.
func NewStatsTree(dir string) (*StatsTree, error) {
	f := &StatsTree{Proc: filepath.Join(dir, "proc"), Cgroup: filepath.Join(dir, "cgroup")}
	for _, d := range []string{filepath.Join(f.Proc, "pressure"), f.Cgroup} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	psi := "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
	if err := os.WriteFile(filepath.Join(f.Proc, "pressure", "memory"), []byte(psi), 0o644); err != nil {
		return nil, err
	}
	return f, f.SetAvailable(12 << 30)
}

// SetAvailable writes a meminfo whose MemAvailable is b bytes, by rename:
// a reader sees the old file or the new one.
func (f *StatsTree) SetAvailable(b int64) error {
	_, _, err := f.SetAvailableAt(b)
	return err
}

// SetAvailableAt is SetAvailable, with the times just before and just
// after the rename that put the new file in place.
func (f *StatsTree) SetAvailableAt(b int64) (before, after time.Time, err error) {
	p := filepath.Join(f.Proc, "meminfo")
	s := fmt.Sprintf("MemTotal:       %d kB\nMemFree:        %d kB\nMemAvailable:   %d kB\nBuffers:        0 kB\nCached:         0 kB\n",
		memTotal>>10, b>>10, b>>10)
	if err := os.WriteFile(p+".tmp", []byte(s), 0o644); err != nil {
		return before, after, err
	}
	before = time.Now()
	err = os.Rename(p+".tmp", p)
	return before, time.Now(), err
}
