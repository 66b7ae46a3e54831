// Package harness is what cri-guard's end-to-end test packages share: the
// checkout's root and scripts (repoRoot, Script, RunScript), the containerd
// of scripts/rt.sh (LookupRuntime, Runtime.Crictl), building cri-guard and
// tools/memhog, running a cri-guard process and waiting until it serves
// (Spawn, StartGuard), CRI connections (Dial, DialCRI), `cri-guard status`
// (Status), and small file helpers (WriteAtomic, WriteMeminfo, ShortTempDir,
// NewUID).
//
// The tests live by environment, one package each: integration/host (the
// v1 host of scripts/rt.sh), integration/cluster (the one-node Kubernetes
// of scripts/cluster.sh) and integration/hostile (floods against a fake
// runtime) use this package; integration/guest (the UML guest of
// scripts/vm.sh) does not yet, and keeps its own path to scripts/vm.sh and
// bin/cri-guard and its own start of cri-guard. Helpers only one package
// uses stay in it; what unit tests share too (WaitFor, FreeAddr) is in
// internal/testutil.
//
// The package has no build tag, unlike the tests over it (tag
// `integration`): `go vet ./...` and `go test -race ./...` compile and
// check it on every run, and its own tests need no harness. It imports
// `testing` and must be imported by test code only, never by cri-guard's
// packages; of cri-guard's own it imports only admin (the status document).
package harness
