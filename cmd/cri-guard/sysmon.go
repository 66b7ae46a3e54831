package main

import (
	"os"
	"strings"
	"syscall"
)

// sysmonSetting keeps the Go runtime's sysmon thread out of its deep sleep.
//
// With one P (setMaxProcs), the P goes idle at least twice per forwarded
// call: waiting for the kubelet's request and for containerd's answer.
// Each time, sysmon sees every P idle and deep-sleeps; the next system call
// (the read of the request or of the answer) must then wake it with a futex,
// on the call's path, and sysmon polls every 20 µs until the P is idle
// again. On this project's 2-core VMs that cycle was 27% of cri-guard's CPU
// samples under load. With schedtrace set, sysmon never deep-sleeps and its
// poll interval backs off to 10 ms while there is nothing to retake.
// Measured with cri-guard-bench --compare-env GODEBUG=schedtrace=2147483647,
// interleaved against containerd: added p50 -30 to -74 µs on every method,
// CPU per proxied call under load 156 -> 114 µs, throughput 0.72 -> 0.77 of
// direct. The price is sysmon's 10 ms poll when idle: about 100 wake-ups
// and 3 ms of CPU per second.
//
// The interval is the largest the runtime takes (2^31-1 ms, 24.8 days), so
// the trace line itself is printed at most once at start-up (only when the
// host has been up longer than that) and then every 24.8 days. An operator
// who sets schedtrace in GODEBUG (e.g. schedtrace=0, to opt out) is obeyed.
const sysmonSetting = "schedtrace=2147483647"

// sysmonEnv returns the environment to re-execute the daemon with so that
// the runtime reads sysmonSetting at start-up (GODEBUG's schedtrace is only
// read then), and whether a re-exec is wanted: not for the subcommands, and
// not when GODEBUG already sets schedtrace.
func sysmonEnv(args, environ []string) ([]string, bool) {
	if len(args) > 0 {
		switch args[0] {
		case "version", "status", "check-config":
			return nil, false
		}
	}
	out := make([]string, 0, len(environ)+1)
	found := false
	for _, kv := range environ {
		v, ok := strings.CutPrefix(kv, "GODEBUG=")
		if !ok {
			out = append(out, kv)
			continue
		}
		for _, setting := range strings.Split(v, ",") {
			if strings.HasPrefix(setting, "schedtrace=") {
				return nil, false
			}
		}
		if v != "" {
			v += ","
		}
		out = append(out, "GODEBUG="+v+sysmonSetting)
		found = true
	}
	if !found {
		out = append(out, "GODEBUG="+sysmonSetting)
	}
	return out, true
}

// keepSysmonAwake re-executes the daemon with sysmonSetting (same PID, so
// systemd's notify and watchdog are unaffected). When the re-exec fails,
// cri-guard runs on without it and says why.
func keepSysmonAwake() {
	env, ok := sysmonEnv(os.Args[1:], os.Environ())
	if !ok {
		return
	}
	exe, err := os.Executable()
	if err == nil {
		err = syscall.Exec(exe, os.Args, env)
	}
	os.Stderr.WriteString("cri-guard: re-exec with GODEBUG=" + sysmonSetting + " failed, running without it: " + err.Error() + "\n")
}
