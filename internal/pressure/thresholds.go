package pressure

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Value is a threshold or a minimum reclaim: a quantity of bytes, or a
// percentage (a fraction 0–1; of capacity for memory signals, of wall time
// for PSI signals).
type Value struct {
	// Quantity is set for byte values ("100Mi").
	Quantity *resource.Quantity
	// Percentage is the fraction for percent values ("10%" is 0.1), computed
	// in float32 as the kubelet does.
	Percentage float64
}

// Bytes resolves v against capacity, as the kubelet's GetThresholdQuantity.
func (v Value) Bytes(capacity int64) int64 {
	if v.Quantity != nil {
		return v.Quantity.Value()
	}
	return int64(float64(capacity) * v.Percentage)
}

// String renders v as it is configured ("100Mi", "10%").
func (v Value) String() string {
	if v.Quantity != nil {
		return v.Quantity.String()
	}
	return formatPercent(roundPercent(v.Percentage * 100))
}

// roundPercent trims float32 noise for display (0.1 → 10, not 10.0000001).
func roundPercent(p float64) float64 {
	f, _ := strconv.ParseFloat(strconv.FormatFloat(p, 'f', 4, 64), 64)
	return f
}

// Threshold is one eviction threshold.
type Threshold struct {
	// Signal is what the threshold watches.
	Signal Signal
	// Operator is opLessThan for memory signals, opGreaterThan for PSI.
	Operator Operator
	// Hard thresholds act at once; soft ones after GracePeriod. As in the
	// kubelet, a soft threshold whose grace period is 0 is hard.
	Hard bool
	// Value is the threshold itself.
	Value Value
	// GracePeriod is how long a soft threshold must be met continuously
	// before it acts; zero for hard thresholds.
	GracePeriod time.Duration
	// MinReclaim, when set, keeps a met threshold active until the signal is
	// beyond the threshold by this much.
	MinReclaim *Value
}

// String renders t like "hard memory.available<100Mi" or
// "soft memory.pressure.some.avg10>20% grace=30s min-reclaim=5%".
func (t Threshold) String() string {
	var b strings.Builder
	if t.Hard {
		b.WriteString("hard ")
	} else {
		b.WriteString("soft ")
	}
	b.WriteString(string(t.Signal))
	if t.Operator == opGreaterThan {
		b.WriteString(">")
	} else {
		b.WriteString("<")
	}
	b.WriteString(t.Value.String())
	if !t.Hard {
		b.WriteString(" grace=" + t.GracePeriod.String())
	}
	if t.MinReclaim != nil {
		b.WriteString(" min-reclaim=" + t.MinReclaim.String())
	}
	return b.String()
}

// ThresholdConfig holds thresholds in the kubelet's configuration syntax.
type ThresholdConfig struct {
	// Hard is evictionHard: signal → "100Mi" or "10%".
	Hard map[string]string
	// Soft is evictionSoft: signal → "300Mi" or "20%".
	Soft map[string]string
	// SoftGracePeriod is evictionSoftGracePeriod: signal → "30s".
	SoftGracePeriod map[string]string
	// MinimumReclaim is evictionMinimumReclaim: signal → "200Mi" or "5%".
	MinimumReclaim map[string]string
	// TransitionPeriod is evictionPressureTransitionPeriod.
	TransitionPeriod time.Duration
	// AllocatableFromHard is enforceNodeAllocatable containing "pods": then
	// every hard memory.available threshold also applies to
	// allocatableMemory.available (helpers.go addAllocatableThresholds).
	AllocatableFromHard bool
}

// ParseThresholds parses a threshold configuration with the kubelet's rules
// (pkg/kubelet/eviction/helpers.go ParseThresholdConfig): values are
// resource quantities or percentages; "0%" (any zero percentage) and "100%"
// disable a threshold;
// quantities must be positive; every soft threshold needs a grace period;
// minimum reclaims apply to the hard and soft thresholds of their signal.
// PSI signals take percentages only. Thresholds are returned hard first, then
// soft, each sorted by signal. Errors name the field, e.g.
// "evictionSoft[memory.available]: ...".
func ParseThresholds(cfg ThresholdConfig) ([]Threshold, error) {
	if cfg.TransitionPeriod < 0 {
		return nil, fmt.Errorf("evictionPressureTransitionPeriod: must not be negative: %s", cfg.TransitionPeriod)
	}
	var out []Threshold
	for _, hard := range []bool{true, false} {
		field, m := "evictionHard", cfg.Hard
		if !hard {
			field, m = "evictionSoft", cfg.Soft
		}
		for _, sig := range sortedKeys(m) {
			t, err := parseThresholdStatement(Signal(sig), m[sig])
			if err != nil {
				return nil, fmt.Errorf("%s[%s]: %w", field, sig, err)
			}
			if t == nil {
				continue
			}
			t.Hard = hard
			out = append(out, *t)
		}
	}
	grace := make(map[Signal]time.Duration, len(cfg.SoftGracePeriod))
	for _, sig := range sortedKeys(cfg.SoftGracePeriod) {
		if _, ok := operatorFor(Signal(sig)); !ok {
			return nil, fmt.Errorf("evictionSoftGracePeriod[%s]: unsupported eviction signal", sig)
		}
		d, err := time.ParseDuration(cfg.SoftGracePeriod[sig])
		if err != nil {
			return nil, fmt.Errorf("evictionSoftGracePeriod[%s]: %w", sig, err)
		}
		if d < 0 {
			return nil, fmt.Errorf("evictionSoftGracePeriod[%s]: must be a positive value: %s", sig, d)
		}
		grace[Signal(sig)] = d
	}
	reclaim := make(map[Signal]Value, len(cfg.MinimumReclaim))
	for _, sig := range sortedKeys(cfg.MinimumReclaim) {
		v, err := parseMinReclaim(Signal(sig), cfg.MinimumReclaim[sig])
		if err != nil {
			return nil, fmt.Errorf("evictionMinimumReclaim[%s]: %w", sig, err)
		}
		reclaim[Signal(sig)] = v
	}
	for i := range out {
		t := &out[i]
		if !t.Hard {
			d, ok := grace[t.Signal]
			if !ok {
				return nil, fmt.Errorf("evictionSoftGracePeriod[%s]: grace period must be specified for the soft eviction threshold", t.Signal)
			}
			t.GracePeriod = d
			// a soft threshold without a grace period is a hard one:
			// it acts at once and its victim gets the hard-eviction
			// grace (helpers.go isHardEvictionThreshold: GracePeriod == 0)
			t.Hard = d == 0
		}
		if r, ok := reclaim[t.Signal]; ok {
			t.MinReclaim = &r
		}
	}
	if cfg.AllocatableFromHard {
		// the kubelet's addAllocatableThresholds: a copy of each hard
		// memory.available threshold (a soft one with a 0s grace period
		// included) on allocatableMemory.available, appended
		for _, t := range out {
			if t.Signal == SignalMemoryAvailable && t.Hard {
				out = append(out, Threshold{Signal: SignalAllocatableMemoryAvailable, Operator: t.Operator, Hard: true,
					Value: t.Value, MinReclaim: t.MinReclaim})
			}
		}
	}
	return out, nil
}

// parseThresholdStatement mirrors the kubelet's parseThresholdStatement; a
// nil threshold means disabled ("0%" or "100%").
func parseThresholdStatement(sig Signal, val string) (*Threshold, error) {
	op, ok := operatorFor(sig)
	if !ok {
		return nil, errors.New("unsupported eviction signal")
	}
	if strings.HasSuffix(val, "%") {
		if val == "0%" || val == "100%" {
			return nil, nil
		}
		p, err := parsePercentage(val)
		if err != nil {
			return nil, err
		}
		if p < 0 {
			return nil, fmt.Errorf("eviction percentage threshold must be >= 0%%: %s", val)
		}
		if p > 1 {
			return nil, fmt.Errorf("eviction percentage threshold must be <= 100%%: %s", val)
		}
		if p == 0 {
			// The kubelet ignores only the literal "0%"; "0.0%" would give a
			// PSI threshold met by any stall. Treat every zero alike.
			return nil, nil
		}
		return &Threshold{Signal: sig, Operator: op, Value: Value{Percentage: p}}, nil
	}
	if sig.IsPSI() {
		return nil, fmt.Errorf("pressure signals take a percentage such as \"20%%\", not %q", val)
	}
	q, err := resource.ParseQuantity(val)
	if err != nil {
		return nil, fmt.Errorf("%w (want a quantity such as \"100Mi\" or a percentage such as \"10%%\", got %q)", err, val)
	}
	if q.Sign() <= 0 {
		return nil, fmt.Errorf("eviction threshold must be positive: %s", &q)
	}
	return &Threshold{Signal: sig, Operator: op, Value: Value{Quantity: &q}}, nil
}

// parseMinReclaim mirrors the kubelet's parseMinimumReclaims for one entry.
func parseMinReclaim(sig Signal, val string) (Value, error) {
	if _, ok := operatorFor(sig); !ok {
		return Value{}, errors.New("unsupported eviction signal")
	}
	if strings.HasSuffix(val, "%") {
		p, err := parsePercentage(val)
		if err != nil {
			return Value{}, err
		}
		if p < 0 {
			return Value{}, fmt.Errorf("minimum reclaim percentage must be >= 0%%: %s", val)
		}
		if p > 1 {
			return Value{}, fmt.Errorf("minimum reclaim percentage must be <= 100%%: %s", val)
		}
		return Value{Percentage: p}, nil
	}
	if sig.IsPSI() {
		return Value{}, fmt.Errorf("pressure signals take a percentage such as \"5%%\", not %q", val)
	}
	q, err := resource.ParseQuantity(val)
	if err != nil {
		return Value{}, fmt.Errorf("%w (want a quantity such as \"200Mi\" or a percentage such as \"5%%\", got %q)", err, val)
	}
	if q.Sign() < 0 {
		return Value{}, fmt.Errorf("negative reclaim defined: %s", &q)
	}
	return Value{Quantity: &q}, nil
}

// parsePercentage mirrors the kubelet: trailing '%' trimmed, parsed as a
// float32, divided by 100 in float32.
func parsePercentage(val string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimRight(val, "%"), 32)
	if err != nil {
		return 0, err
	}
	if math.IsNaN(v) {
		return 0, fmt.Errorf("invalid percentage %q", val)
	}
	return float64(float32(v) / 100), nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Limit is the threshold in the unit of Observation.Value. A percentage of
// a memory signal needs the observed capacity; ok is false without it.
func (t Threshold) Limit(o Observation) (v float64, ok bool) {
	switch {
	case t.Signal.IsPSI():
		// percentages are parsed in float32, as the kubelet does: trim the noise
		return math.Round(t.Value.Percentage*100*1e4) / 1e4, true
	case t.Value.Quantity != nil:
		return float64(t.Value.Quantity.Value()), true
	case o.Capacity > 0:
		return float64(t.Value.Bytes(o.Capacity)), true
	}
	return 0, false
}
