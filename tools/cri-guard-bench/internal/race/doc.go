// Package race is `cri-guard-bench race`: cri-guard raced against the
// kernel's OOM killer. In a pods cgroup with a memory limit (the Domain),
// beside bystanders (a BestEffort, a Burstable and a critical static pod),
// a runaway pod grows anonymous memory at a fixed rate (tools/memhog
// -anon); a run ends when cri-guard stops the runaway's sandbox or the
// kernel OOM-kills anything in the domain. Each mode is a cri-guard
// configuration (Config); the table gives, per mode and rate, runs won and
// lost, whom the OOM killer took, the times from the threshold crossing to
// the decision and to the sandbox stopped, and the peak usage. A kill is
// counted from /dev/kmsg's "oom-kill:" lines, which name the victim's
// cgroup: on cgroup v1 the domain's own oom_kill counter stays 0. Hold the
// harness lock while it runs:
//
//	go build -o /tmp/memhog ./tools/memhog
//	flock -o /tmp/cri-guard-harness.lock cri-guard-bench race \
//	    --runtime-endpoint /tmp/cri-guard-rt/containerd.sock \
//	    --cri-guard-binary bin/cri-guard --memhog /tmp/memhog [--quick]
package race
