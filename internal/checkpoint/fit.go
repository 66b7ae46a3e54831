package checkpoint

import (
	"fmt"
	"maps"
	"slices"

	"github.com/cri-guard/cri-guard/internal/pod"
)

// Option is an optional setting of New.
type Option func(*Store)

// WithRules says by which critical rules the records' pods are classified:
// a record trimmed to fit maxRecordSize keeps the annotations these rules
// read (Rules.Annotations, the configured priority key included). Without
// it, the default rules'.
func WithRules(r pod.CriticalRules) Option {
	return func(s *Store) { s.kept = keptAnnotations(r) }
}

// keptAnnotations are never left out of a record: what the critical rules
// classify a pod by, should restore have only the record to go by, and the
// grace period's.
func keptAnnotations(r pod.CriticalRules) []string {
	return append(r.Annotations(), pod.AnnotationTerminationGracePeriod)
}

// fit encodes r within maxRecordSize by leaving out its largest labels and
// annotations first, never the kept ones (WithRules).
func (s *Store) fit(r Record) ([]byte, error) {
	type entry struct {
		label bool
		key   string
		size  int
	}
	var entries []entry
	for k, v := range r.Pod.Labels {
		entries = append(entries, entry{true, k, len(k) + len(v)})
	}
	for k, v := range r.Pod.Annotations {
		if !slices.Contains(s.kept, k) {
			entries = append(entries, entry{false, k, len(k) + len(v)})
		}
	}
	slices.SortFunc(entries, func(a, b entry) int { return b.size - a.size })
	trimmed := r
	trimmed.Pod.Labels, trimmed.Pod.Annotations = maps.Clone(r.Pod.Labels), maps.Clone(r.Pod.Annotations)
	data, err := encode(trimmed)
	dropped := 0
	for err == nil && len(data) > maxRecordSize && dropped < len(entries) {
		// drop the largest entries worth the excess (JSON escaping can
		// make an entry take more room than its bytes), then measure again
		excess := len(data) - maxRecordSize
		for freed := 0; freed < excess && dropped < len(entries); dropped++ {
			e := entries[dropped]
			if e.label {
				delete(trimmed.Pod.Labels, e.key)
			} else {
				delete(trimmed.Pod.Annotations, e.key)
			}
			freed += e.size
		}
		data, err = encode(trimmed)
	}
	if err != nil {
		return nil, err
	}
	if len(data) > maxRecordSize {
		return nil, fmt.Errorf("put checkpoint %q: %d bytes without its labels and annotations, over the %d-byte record limit", r.Pod.Key(), len(data), maxRecordSize)
	}
	s.log.WithField("pod_uid", r.Pod.UID).WithField("left_out", dropped).
		Warn("checkpoint record over the size limit: its largest labels and annotations left out (restore takes them from containerd)")
	return data, nil
}
