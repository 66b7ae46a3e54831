package main

import (
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/sirupsen/logrus"
)

// health is what cri-guard serves without: the parts that failed at start
// or later (the config file, the metrics or admin listener, the API
// connection) and why. None of them is a reason to stop serving the CRI
// socket: the kubelet has no runtime while cri-guard does not listen, and
// after the node's NotReady toleration every pod of the node is evicted.
// A broken part is retried in the background and protection goes on with
// what works; the list is shown by `cri-guard status`, the
// cri_guard_degraded_parts metric and systemd's STATUS= line.
type health struct {
	log    *logrus.Entry
	status func(string) // systemd STATUS=; may be nil

	mu    sync.Mutex
	parts map[string]string
}

func newHealth(log *logrus.Entry, status func(string)) *health {
	return &health{log: log, status: status, parts: map[string]string{}}
}

// set marks part as degraded for reason; a change is logged once.
func (h *health) set(part, reason string) {
	h.mu.Lock()
	old, had := h.parts[part]
	h.parts[part] = reason
	h.mu.Unlock()
	if !had || old != reason {
		h.log.WithField("part", part).WithField("reason", reason).Warn("serving degraded")
		h.publish()
	}
}

// clear marks part as working again.
func (h *health) clear(part string) {
	h.mu.Lock()
	_, had := h.parts[part]
	delete(h.parts, part)
	h.mu.Unlock()
	if had {
		h.log.WithField("part", part).Info("working again")
		h.publish()
	}
}

// problems lists "part: reason", sorted.
func (h *health) problems() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.parts))
	for _, k := range slices.Sorted(maps.Keys(h.parts)) {
		out = append(out, k+": "+h.parts[k])
	}
	return out
}

func (h *health) publish() {
	if h.status == nil {
		return
	}
	if p := h.problems(); len(p) > 0 {
		h.status("degraded: " + strings.Join(p, "; "))
	} else {
		h.status("serving")
	}
}
