// Package host holds cri-guard's end-to-end tests on this host's cgroup v1
// harness (build tag `integration`): the cri-guard binary, built in TestMain,
// runs in front of a real containerd started by scripts/rt.sh and is driven
// with crictl, critest and a Go CRI client.
//
// Run them with `make test`, or by hand:
//
//	scripts/rt.sh up
//	CRI_GUARD_RT=/tmp/cri-guard-rt go test -tags integration -race -count=1 ./integration/host/
//	scripts/rt.sh down
//
// Without CRI_GUARD_RT (or without its containerd socket) every test skips
// and says why. The package builds the cri-guard binary and reads its
// checkpoints (checkpoint, pod): it tests the binary. The TestContainerEvents*
// tests need the second containerd of `scripts/rt.sh up-events` too
// (CRI_GUARD_RT_EVENTS names its socket).
//
// The TestHostile* tests put cri-guard on a hostile host, against the real
// containerd (the floods are measured in integration/hostile): a FIFO at
// meminfo, SIGHUP and the pressure history, a full state disk and the
// re-admission guard, sandbox configs larger than a list answer may be, a
// full state disk and critical pods, forged and untrusted state, broken
// stats files, bad uids, failing and cut RunPodSandbox calls. Each was seen
// failing on the code before the fixes: CRI_GUARD_BIN=<older build> runs
// the package against another binary.
//
// The other environments have packages of their own: integration/cluster
// (a one-node Kubernetes), integration/guest (cgroup v2 and systemd in a
// UML guest), integration/hostile (floods). What they share is in
// integration/harness; what only these tests use (the cri-guard under test,
// fake stats, pod configs, the cleanup of this process's pods) stays here.
package host
