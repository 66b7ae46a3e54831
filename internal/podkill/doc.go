// Package podkill kills a pod's processes past the runtime: the sync loop's
// grace cut when the node is a moment from OOM, where waiting for the
// runtime's stop would let the victim use the last of the memory.
//
// Its rules:
//   - Only a cgroup strictly under the pods cgroup is ever signalled
//     (errNotAPodCgroup).
//   - No kill blocks its caller: Bounded runs each on a goroutine of its
//     own, its caller waiting at most a timeout (errTimeout), since a
//     wedged cgroup file must not hold the sync loop.
//
// Package podkill takes where the memory hierarchy is from package
// pressure's sampler (Sampler.MemoryCgroup) and its group paths from
// pressure.CgroupPath; it imports no other cri-guard package.
package podkill
