// Package idle is `cri-guard-bench idle`: the race modes' cri-guards
// (race.Config) started side by side on one empty pods cgroup, each arming
// what it would on a node (memcg notification, the fast poll's watch), and
// each one's CPU time, on-CPU time, thread switches, VmRSS and wake-ups over
// the same interval (default 10 minutes; "psi" is the previous release's
// default configuration). --relist adds the kubelet PLEG's calls,
// --compare-binary a previous release beside:
//
//	cri-guard-bench idle --runtime-endpoint /tmp/cri-guard-rt/containerd.sock \
//	    --cri-guard-binary bin/cri-guard [--modes default,psi --duration 10m]
package idle
