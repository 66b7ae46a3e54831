package config

import (
	"encoding/json"
	"fmt"
	"regexp"
)

// KubeletRelease is a kubelet minor release ("1.37") whose computation of
// the memory signals cri-guard follows.
type KubeletRelease string

// The kubelet releases cri-guard can follow, oldest first. From 1.37 the
// kubelet takes the node's huge page pool off memory.available
// (HugepageAwareEviction, beta and on by default in 1.37); up to 1.36 it
// counts the pool as available.
const (
	kubelet135 KubeletRelease = "1.35"
	kubelet136 KubeletRelease = "1.36"
	kubelet137 KubeletRelease = "1.37"
	// defaultKubeletCompatibility is the newest release cri-guard follows.
	defaultKubeletCompatibility = kubelet137
)

// numberLiteral is a JSON number YAML gave for an unquoted 1.37.
var numberLiteral = regexp.MustCompile(`^[0-9]+\.[0-9]+$`)

// UnmarshalJSON takes "1.37" and also an unquoted 1.37, which YAML reads as
// a number: its literal is kept as written (1.30 would read as 1.3, but no
// release cri-guard follows ends in 0).
func (r *KubeletRelease) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*r = KubeletRelease(s)
		return nil
	}
	if numberLiteral.Match(b) {
		*r = KubeletRelease(b)
		return nil
	}
	return fmt.Errorf("want a kubelet release such as \"1.37\", got %s", b)
}

// valid reports whether cri-guard knows how release r computes the signals.
func (r KubeletRelease) valid() bool {
	switch r {
	case kubelet135, kubelet136, kubelet137:
		return true
	}
	return false
}

// SubtractHugePages reports whether the release in force takes the huge
// page pool off memory.available (pressure.SamplerConfig.SubtractHugePages).
func (c Config) SubtractHugePages() bool {
	return c.KubeletCompatibility == kubelet137
}
