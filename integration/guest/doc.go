// Package guest holds cri-guard's end-to-end tests on the platform users run
// (build tag `integration`): cgroup v2 with systemd as PID 1, containerd 2.x
// with the systemd cgroup driver, a current kubelet, and cri-guard installed
// from its .deb and run by its unit. That platform runs in the User-mode Linux
// guest of scripts/vm.sh (the CI host can be none of it itself).
//
// UML is slow at creating processes (a crictl call takes seconds) and at page
// faults (a few MB/s): each test sends the guest one script (testdata/*.sh,
// run by vm-agent) that does a whole scenario there and prints what it saw as
// `key=value` lines, which the test checks; timings belong to the host's
// tests, the guest proves the mechanisms.
//
//	scripts/vm.sh up
//	CRI_GUARD_VM=/tmp/cri-guard-vm go test -tags integration -count=1 -v ./integration/guest/
//	scripts/vm.sh down
//
// CRI_GUARD_VM names the guest's directory (scripts/vm.sh's, default
// /tmp/cri-guard-vm); without it every test skips and says why. `make test` runs them in
// its last stage, after the host stages, and always powers the guest off.
package guest
