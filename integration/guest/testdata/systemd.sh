# cri-guard under systemd: one behaviour per argument. key=value lines for the test.
. "$(dirname "$0")/common.sh"
case "$1" in
ready)
  # READY=1 only once the restore is done: restart, then compare the monotonic
  # times of cri-guard's "restore done" and systemd's "Started" for this start.
  before=$(journalctl -u cri-guard --no-pager -o cat | wc -l)
  systemctl restart cri-guard
  echo "active=$(systemctl is-active cri-guard)"
  journalctl -u cri-guard --no-pager -o short-monotonic | tail -n +$((before + 1)) >/tmp/ready.log
  grep -E 'restore done|Started|serving|READY' /tmp/ready.log | sed 's/^/# /'
  echo "restore_done_at=$(grep -m1 'restore done' /tmp/ready.log | sed -n 's/^\[ *\([0-9.]*\)\].*/\1/p')"
  echo "started_at=$(grep -m1 'Started cri-guard' /tmp/ready.log | sed -n 's/^\[ *\([0-9.]*\)\].*/\1/p')"
  echo "restored=$(grep -m1 'restore done' /tmp/ready.log | sed -n 's/.* records=\([0-9]*\).*/\1/p')"
  ;;
watchdog)
  # A SIGSTOPped cri-guard sends no WATCHDOG=1: systemd kills it after
  # WatchdogSec and restarts it; the pods run on.
  echo "watchdog_sec=$(systemctl show -p WatchdogUSec --value cri-guard)"
  sb=$(ready_sandboxes); ct=$(running_containers)
  n0=$(systemctl show -p NRestarts --value cri-guard); p0=$(mainpid)
  kill -STOP "$p0"; t0=$SECONDS
  wait_for 120 sh -c "p=\$(systemctl show -p MainPID --value cri-guard); [ \"\$p\" != 0 ] && [ \"\$p\" != $p0 ] && systemctl is-active -q cri-guard"
  echo "restarted_after_s=$((SECONDS - t0))"
  echo "nrestarts=$(( $(systemctl show -p NRestarts --value cri-guard) - n0 ))"
  echo "new_pid=$([ "$(mainpid)" != "$p0" ] && echo yes || echo no)"
  journalctl -u cri-guard --no-pager -o cat | grep -iE 'watchdog' | tail -2 | sed 's/^/# /'
  echo "watchdog_logged=$(journalctl -u cri-guard --no-pager -o cat | grep -c 'Watchdog timeout')"
  echo "sandboxes_kept=$([ "$(ready_sandboxes)" = "$sb" ] && echo yes || echo "no: before $sb after $(ready_sandboxes)")"
  echo "containers_kept=$([ "$(running_containers)" = "$ct" ] && echo yes || echo "no: before $ct after $(running_containers)")"
  ;;
sigkill)
  # A SIGKILL is restarted (Restart=always) and the new process restores.
  sb=$(ready_sandboxes)
  n0=$(systemctl show -p NRestarts --value cri-guard); p0=$(mainpid)
  kill -KILL "$p0"; t0=$SECONDS
  wait_for 120 sh -c "p=\$(systemctl show -p MainPID --value cri-guard); [ \"\$p\" != 0 ] && [ \"\$p\" != $p0 ] && systemctl is-active -q cri-guard"
  echo "restarted_after_s=$((SECONDS - t0))"
  echo "nrestarts=$(( $(systemctl show -p NRestarts --value cri-guard) - n0 ))"
  echo "restore=$(journalctl -u cri-guard --no-pager -o cat _PID="$(mainpid)" | grep -m1 'restore done')"
  s=$(cri-guard status --json)
  echo "status_pods=$(jq '[.pods[] | select(.state == "ready")] | length' <<<"$s")"
  jq -r '.pods[] | "# pod \(.namespace)/\(.name) \(.state) critical=\(.critical)"' <<<"$s"
  echo "sandboxes_kept=$([ "$(ready_sandboxes)" = "$sb" ] && echo yes || echo no)"
  ;;
reload)
  # systemctl reload (SIGHUP) applies a new threshold without a restart.
  p0=$(mainpid)
  cp /etc/cri-guard/config.yaml /tmp/config.yaml.orig
  sed -i 's/allocatableMemory.available: 150Mi/allocatableMemory.available: 170Mi/' /etc/cri-guard/config.yaml
  systemctl reload cri-guard
  wait_for 30 sh -c "journalctl -u cri-guard --no-pager -o cat _PID=$p0 | grep -q 'eviction thresholds changed'"
  journalctl -u cri-guard --no-pager -o cat _PID="$p0" | grep 'eviction thresholds changed' | tail -1 | sed 's/^/# /'
  echo "threshold=$(cri-guard status --json | jq -r '.signals[] | select(.signal == "allocatableMemory.available") | .thresholds[0].value')"
  echo "same_pid=$([ "$(mainpid)" = "$p0" ] && echo yes || echo no)"
  cp /tmp/config.yaml.orig /etc/cri-guard/config.yaml
  systemctl reload cri-guard
  wait_for 30 sh -c "[ \"\$(cri-guard status --json | jq -r '.signals[] | select(.signal == \"allocatableMemory.available\") | .thresholds[0].value')\" = 150Mi ]"
  echo "restored_threshold=$(cri-guard status --json | jq -r '.signals[] | select(.signal == "allocatableMemory.available") | .thresholds[0].value')"
  ;;
hardening)
  # The unit's hardening leaves cri-guard what it needs: PSI triggers, cgroup
  # reads, its sockets, containerd's socket.
  systemctl show cri-guard -p ProtectSystem -p ProtectHome -p PrivateTmp -p PrivateDevices -p NoNewPrivileges \
    -p ProtectKernelModules -p RestrictNamespaces -p MemoryDenyWriteExecute -p RestrictAddressFamilies | sed 's/^/# /'
  echo "protect_system=$(systemctl show -p ProtectSystem --value cri-guard)"
  echo "nnp=$(systemctl show -p NoNewPrivileges --value cri-guard)"
  p=$(mainpid)
  echo "psi_armed=$(journalctl -u cri-guard --no-pager -o cat _PID="$p" | grep -c 'psi trigger armed')"
  echo "psi_disabled=$(journalctl -u cri-guard --no-pager -o cat _PID="$p" | grep -c 'psi trigger disabled\|psi trigger stopped')"
  s=$(cri-guard status --json)
  echo "stats_error=$(jq -r '.statsError // ""' <<<"$s")"
  echo "source=$(jq -r .source <<<"$s")"
  echo "runtime_connected=$(jq -r .runtime.connected <<<"$s")"
  echo "metrics=$(curl -s --max-time 20 http://127.0.0.1:9713/metrics | grep -c '^cri_guard_')"
  echo "cri=$(crictl version >/dev/null 2>&1 && echo ok || echo fail)"
  # The unit's exposure as systemd rates it here ("→ Overall exposure level
  # for cri-guard.service: 2.0 OK").
  systemd-analyze security cri-guard --no-pager 2>/dev/null | grep -v '✓' | sed 's/^/# /'
  echo "exposure=$(systemd-analyze security cri-guard --no-pager 2>/dev/null | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')"
  # PSI triggers keep their 1 s window (CAP_SYS_RESOURCE is in the bounding
  # set): on the pods cgroup's memory.pressure for this process, and on
  # /proc/pressure/memory for the start provision.sh made before the kubelet
  # created kubepods.slice; never widened to 2 s in this boot.
  j=$(journalctl -u cri-guard -b --no-pager -o cat)
  grep -E 'psi trigger' <<<"$j" | tail -6 | sed 's/^/# /'
  echo "psi_cgroup_1s=$(journalctl -u cri-guard --no-pager -o cat _PID="$p" | grep 'psi trigger armed' | grep -c 'memory.pressure: some [0-9]* 1000000')"
  echo "psi_node_1s=$(grep 'psi trigger armed' <<<"$j" | grep -c '/proc/pressure/memory: some [0-9]* 1000000')"
  echo "psi_widened=$(grep -c 'armed with the window widened' <<<"$j")"
  # What the sandbox looks like from inside: the two capabilities (CAP_KILL
  # 5, CAP_SYS_RESOURCE 24), /sys/fs/cgroup writable, /proc/sys read-only.
  echo "cap_eff=$(sed -n 's/^CapEff:[[:space:]]*//p' /proc/"$p"/status)"
  echo "cgroup_mount=$(nsenter -t "$p" -m -- findmnt -no OPTIONS /sys/fs/cgroup | cut -d, -f1)"
  echo "proc_sys_mount=$(nsenter -t "$p" -m -- findmnt -no OPTIONS /proc/sys | cut -d, -f1)"
  ;;
containerd-restart)
  # A restart of containerd leaves cri-guard running (Wants=, not Requires=):
  # same process, no restart counted, and CRI calls through it reach the new
  # containerd once its runtime connection has reconnected by itself.
  p0=$(mainpid); n0=$(systemctl show -p NRestarts --value cri-guard)
  c0=$(systemctl show -p MainPID --value containerd)
  sb=$(ready_sandboxes)
  systemctl restart containerd
  wait_for 120 systemctl is-active containerd
  echo "containerd_restarted=$([ "$(systemctl show -p MainPID --value containerd)" != "$c0" ] && echo yes || echo no)"
  wait_for 60 crictl version
  crictl version 2>&1 | sed 's/^/# /'
  echo "runtime_name=$(crictl version 2>/dev/null | sed -n 's/^RuntimeName:[[:space:]]*//p')"
  echo "same_pid=$([ "$(mainpid)" = "$p0" ] && echo yes || echo "no: $p0 then $(mainpid)")"
  echo "nrestarts=$(( $(systemctl show -p NRestarts --value cri-guard) - n0 ))"
  echo "active=$(systemctl is-active cri-guard)"
  echo "runtime_connected=$(cri-guard status --json | jq -r .runtime.connected)"
  echo "sandboxes_kept=$([ "$(ready_sandboxes)" = "$sb" ] && echo yes || echo "no: before $sb after $(ready_sandboxes)")"
  ;;
*) echo "usage: systemd.sh ready|watchdog|sigkill|reload|hardening|containerd-restart" >&2; exit 2 ;;
esac
