package benchutil

import (
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Percentile returns the p-th percentile (0..100) of ds by nearest rank.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	idx := int(float64(len(s))*p/100+0.5) - 1
	idx = max(0, min(idx, len(s)-1))
	return s[idx]
}

// FmtBytes prints a byte count as a binary quantity (200Mi, 1Gi).
func FmtBytes(v int64) string { return resource.NewQuantity(v, resource.BinarySI).String() }

// MiB prints a byte count in MiB with one decimal.
func MiB(b int64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }

// Micros prints a duration in whole microseconds.
func Micros(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/float64(time.Microsecond)) }
