package pressure

import (
	"os"
	"path/filepath"
)

// TriggerFile returns the pressure file a PSI trigger should watch: the pods
// cgroup's memory.pressure in the unified hierarchy when a pods cgroup is
// configured and that file exists, else the node's <proc-root>/pressure/memory.
func (s *Sampler) TriggerFile() string {
	if s.podsGroup != "" && s.layout.unifiedDir != "" {
		p := filepath.Join(s.layout.unifiedDir, s.podsGroup, "memory.pressure")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return s.procPSI
}
