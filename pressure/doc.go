// Package pressure measures memory pressure and decides when eviction
// thresholds are met. It owns reading stats (cgroup memory files, /proc/meminfo,
// PSI), the eviction signals, threshold parsing and evaluation in the
// kubelet's semantics, and the PSI trigger watcher. It imports no other
// cri-guard package.
//
// # Sampling
//
// A Sampler (NewSampler(SamplerConfig{CgroupRoot, ProcRoot, SysRoot,
// PodsCgroup, SubtractHugePages})) reads:
//
//   - Node: capacity from <proc-root>/meminfo (MemTotal). On a unified host
//     whose root cgroup has the memory controller (Source SourceCgroupV2) the
//     working set is usage − inactive_file of the root cgroup (usage is
//     memory.current, or MemTotal − MemFree where the root has none, as runc
//     computes it). On hybrid and v1 hosts (Source SourceMeminfo) the working
//     set is MemTotal − MemAvailable: the kernel's own estimate of memory that
//     cannot be reclaimed without swapping, the closest meminfo equivalent of
//     the kubelet's usage − inactive_file. memory.available = capacity −
//     working set. Node PSI comes from <proc-root>/pressure/memory (else the
//     unified root's memory.pressure).
//
//   - The huge page pool: every size's nr_hugepages × page size under
//     <sys-root>/kernel/mm/hugepages, the source of cadvisor's machine info
//     and so of the kubelet's node capacity hugepages-<size>. The sizes are
//     listed once (the kernel fixes them at boot), the counts read at each
//     sample. With SamplerConfig.SubtractHugePages (the kubelet from 1.37,
//     HugepageAwareEviction) the pool is taken off memory.available, down
//     to 0, and percentages of memory.available refer to available +
//     working set, i.e. MemTotal less the pool; allocatableMemory.available
//     is never adjusted, as in the kubelet. The kubelet's working set (memcg
//     usage − inactive_file) never counts the pool, nor does a root
//     memory.current; MemTotal − MemAvailable and MemTotal − MemFree do
//     (the kernel takes the pool out of free memory), so with those the
//     pool first leaves the working set: it is taken off once, and only
//     the capacity of percentages moves. A pool that cannot be read at a
//     sample keeps the last one read and sets NodeSample.HugePagesError.
//
//   - The pods cgroup (SamplerConfig.PodsCgroup): allocatableMemory.available
//     = (its limit, or capacity) − its working set, and its PSI, which the PSI
//     signals use in preference to the node's. Failures to read it are
//     reported in NodeSample.PodsError, node figures stay valid.
//
//   - A pod (Sampler.Pod(cgroupParent)): the cgroup parent from the CRI
//     request is resolved by CgroupPath (cgroupfs paths as they are; a systemd
//     slice leaf "kubepods-burstable-pod<uid>.slice" expanded to
//     /kubepods.slice/kubepods-burstable.slice/...). Memory comes from the
//     hierarchy that holds the memory controller: the unified one
//     (memory.current, memory.stat inactive_file, memory.min/low as the known
//     request) or, on hybrid hosts, <cgroup-root>/memory (memory.usage_in_bytes,
//     memory.stat total_inactive_file, memory.soft_limit_in_bytes). PSI comes
//     from the unified hierarchy (<cgroup-root>/unified on hybrid hosts). A
//     cgroup with neither gives ErrNoStats: "no stats" is not zero usage.
//
//   - And it kills: KillPod(cgroupParent) ends a pod cgroup's processes past the runtime
//     (the sync loop's grace cut a moment from OOM): cgroup.kill on v2,
//     SIGKILL to every process in the v1 memory cgroup and its children
//     otherwise; it refuses a cgroup not strictly under the pods cgroup.
//     Bounded runs it on its reader goroutine, bounded like a read.
//
// Files are read with one reusable buffer and hand-written parsers, so a node
// sample costs a few syscalls and no per-sample parsing allocations; cgroups/v3
// cgroup2 is used to detect the layout (RootControllers) and validate group
// paths (VerifyGroupPath), not on the hot path, since its StatFiltered reads
// many files a sample does not need and treats missing files as zero.
//
// # Thresholds
//
// ParseThresholds takes the kubelet's evictionHard, evictionSoft,
// evictionSoftGracePeriod and evictionMinimumReclaim maps. Signals:
// memory.available and allocatableMemory.available (bytes or % of capacity,
// met when the observation is below), memory.pressure.{some,full}.{avg10,avg60}
// (percent, met when above). An Evaluator (NewEvaluator(thresholds,
// transition)) is fed NodeSample.Observations() with an explicit time and
// returns the thresholds that act (Result.Met), soft ones waiting for their
// grace period (Result.Pending), and the MemoryPressure condition, which
// stays for the transition period after the last time any threshold was met.
// PSI averages in a NodeSample are kept fresh (psiAverage): the kernel
// updates avg10 and avg60 every 2 s, the sampler advances them at each
// sample from the stall total with the same exponential decay and reports
// the larger of the kernel's figure and its own.
// Minimum reclaim keeps an acting memory threshold met until available ≥
// threshold + reclaim (for PSI: until pressure ≤ threshold − reclaim).
//
// # Triggers
//
// A Trigger (NewTrigger(path, "some 150000 2000000")) arms a PSI trigger and
// calls back each time the kernel signals it. Only a file on procfs or
// cgroup2 takes a trigger: any other (a fake tree under --proc-root) is
// refused with ErrNotPressureFile, by NewTrigger and again by Run on the
// opened file, and nothing is written to it. Run ends on context
// cancellation (nil), cgroup removal (ErrCgroupGone) or a trigger the kernel
// refuses (ErrTriggerRejected: without CAP_SYS_RESOURCE, windows must be
// multiples of 2 s; WidenTriggerSpec gives the 2 s spec to arm instead).
// ParseTriggerSpec checks a spec alone (config validation).
//
// # Kernel memory notifications
//
// MemcgNotifiers (v1) are memcg usage thresholds on the pods cgroup
// (cgroup.event_control + eventfd) at each allocatableMemory.available
// threshold and, given a margin, at that margin before it (the near
// level, which starts the sync loop's fast poll). Their level follows
// inactive_file: the owner hands each housekeeping sample to Relevel
// (NodeSample.AllocatableInactiveFileBytes), which re-registers only when
// the level moved 1 MiB, so an idle notifier takes no timer and reads no
// file of its own. MemoryEventsWatcher (v2,
// which has no usage thresholds) follows the pods cgroup's
// memory.events.local with inotify: it changes when the cgroup meets
// memory.high or memory.max or an OOM happens in it.
//
// # Reads that cannot block
//
// Stats files are opened O_NONBLOCK and read only when they are regular (a
// FIFO put at meminfo is an error at once). Bounded wraps a Sampler so that
// every sample runs in its own goroutine and its caller waits at most a
// timeout (ErrStatsTimeout; while a read is stuck, the next fail at once).
// Each signal stands or fails on its own: a broken pressure file sets
// NodeSample.PSIError and loses the PSI signals only.
package pressure
