// Package pressure measures memory pressure and decides when eviction
// thresholds are met: reading stats (cgroup v1 and v2 memory files,
// /proc/meminfo, PSI, the huge page pool), the eviction signals, threshold
// parsing and evaluation in the kubelet's semantics, PSI triggers, kernel
// memory notifications (v1 memcg thresholds, the v2 memory.events watch).
// Killing a pod cgroup past the runtime is package podkill's, told by
// Sampler.MemoryCgroup where the pods' memory is.
//
// Its rules:
//   - Every root is a parameter (SamplerConfig: CgroupRoot, ProcRoot,
//     SysRoot), so tests run on fake trees.
//   - No read blocks its caller: stats files are opened O_NONBLOCK and read
//     only when regular, and Bounded runs each sample on a goroutine of its
//     own, its caller waiting at most a timeout (errStatsTimeout).
//   - Each signal stands or fails on its own: a broken pressure file loses
//     the PSI signals only (NodeSample.PSIError), a broken pods cgroup the
//     pods cgroup's signals only (NodeSample.PodsError).
//   - "No stats" is not zero usage (ErrNoStats).
//   - A trigger is written only to a file on procfs or cgroup2
//     (ErrNotPressureFile).
//   - The hot path reads with reused buffers and hand-written parsers; no
//     per-sample parsing allocations.
//
// docs/design.md ("Measuring pressure") says where each signal comes from on
// v1, hybrid and v2 hosts.
//
// Package pressure imports no other cri-guard package.
package pressure
