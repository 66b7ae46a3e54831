package pressure

import (
	"k8s.io/apimachinery/pkg/api/resource"
)

// Signal names an eviction signal, spelled as in the kubelet's configuration.
type Signal string

// The signals cri-guard evaluates.
const (
	// SignalMemoryAvailable is capacity minus the node's working set.
	SignalMemoryAvailable Signal = "memory.available"
	// SignalAllocatableMemoryAvailable is the pods cgroup's capacity minus
	// its working set.
	SignalAllocatableMemoryAvailable Signal = "allocatableMemory.available"
	// SignalPSISomeAvg10 is memory PSI "some" avg10, in percent.
	SignalPSISomeAvg10 Signal = "memory.pressure.some.avg10"
	// SignalPSISomeAvg60 is memory PSI "some" avg60, in percent.
	SignalPSISomeAvg60 Signal = "memory.pressure.some.avg60"
	// SignalPSIFullAvg10 is memory PSI "full" avg10, in percent.
	SignalPSIFullAvg10 Signal = "memory.pressure.full.avg10"
	// SignalPSIFullAvg60 is memory PSI "full" avg60, in percent.
	SignalPSIFullAvg60 Signal = "memory.pressure.full.avg60"
)

// Operator is how an observation is compared with a threshold.
type Operator string

// Operators, named as the kubelet names them.
const (
	// opLessThan is met when the observed value is below the threshold
	// (memory signals).
	opLessThan Operator = "LessThan"
	// opGreaterThan is met when the observed value is above the threshold
	// (PSI signals).
	opGreaterThan Operator = "GreaterThan"
)

// operatorFor returns the operator of a known signal; ok is false for an
// unknown signal.
func operatorFor(s Signal) (op Operator, ok bool) {
	switch s {
	case SignalMemoryAvailable, SignalAllocatableMemoryAvailable:
		return opLessThan, true
	case SignalPSISomeAvg10, SignalPSISomeAvg60, SignalPSIFullAvg10, SignalPSIFullAvg60:
		return opGreaterThan, true
	}
	return "", false
}

// IsPSI reports whether s is a PSI (percent) signal.
func (s Signal) IsPSI() bool {
	op, ok := operatorFor(s)
	return ok && op == opGreaterThan
}

// Observation is the observed value of one signal.
type Observation struct {
	// Signal is what was observed.
	Signal Signal
	// Available is the available bytes (memory signals).
	Available int64
	// Capacity is the capacity percentages of memory signals refer to.
	Capacity int64
	// Percent is the observed PSI average, 0–100 (PSI signals).
	Percent float64
}

// String renders the observed value: bytes as a quantity, PSI as percent.
func (o Observation) String() string {
	if o.Signal.IsPSI() {
		return formatPercent(o.Percent)
	}
	return formatBytes(o.Available)
}

// Observations returns the signals this sample supports. PSI signals come
// from the pods cgroup when it was read, else from the node; they are
// absent when PSI is unavailable. allocatableMemory.available is present
// only when the pods cgroup was read.
func (n NodeSample) Observations() map[Signal]Observation {
	obs := make(map[Signal]Observation, 6)
	// The capacity is available + working set, as the kubelet's
	// makeSignalObservations has it: MemTotal, or MemTotal less the huge
	// page pool once that is subtracted (the working set alone when that
	// left nothing available).
	obs[SignalMemoryAvailable] = Observation{
		Signal: SignalMemoryAvailable, Available: n.AvailableBytes, Capacity: n.AvailableBytes + n.WorkingSetBytes,
	}
	if n.HasAllocatable {
		obs[SignalAllocatableMemoryAvailable] = Observation{
			Signal:    SignalAllocatableMemoryAvailable,
			Available: n.AllocatableAvailableBytes,
			Capacity:  n.AllocatableCapacityBytes,
		}
	}
	some, full := n.PodsSome, n.PodsFull
	if some == nil || full == nil {
		if !n.HasPSI {
			return obs
		}
		some, full = &n.Some, &n.Full
	}
	obs[SignalPSISomeAvg10] = Observation{Signal: SignalPSISomeAvg10, Percent: some.Avg10}
	obs[SignalPSISomeAvg60] = Observation{Signal: SignalPSISomeAvg60, Percent: some.Avg60}
	obs[SignalPSIFullAvg10] = Observation{Signal: SignalPSIFullAvg10, Percent: full.Avg10}
	obs[SignalPSIFullAvg60] = Observation{Signal: SignalPSIFullAvg60, Percent: full.Avg60}
	return obs
}

// formatBytes renders a byte count as a binary-SI quantity ("80Mi").
func formatBytes(v int64) string {
	return resource.NewQuantity(v, resource.BinarySI).String()
}

// Value is the observation as a number: available bytes for memory
// signals, percent for PSI signals.
func (o Observation) Value() float64 {
	if o.Signal.IsPSI() {
		return o.Percent
	}
	return float64(o.Available)
}
