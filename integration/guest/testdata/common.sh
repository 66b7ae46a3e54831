# Helpers for the guest scripts (sourced). Everything here is cheap in UML:
# as few processes as possible, waits bounded.
set -u
now() { echo "${EPOCHREALTIME}"; }
mainpid() { systemctl show -p MainPID --value cri-guard; }
# wait_for SECS CMD...: run CMD every second until it succeeds; 1 if it never did.
wait_for() {
  local end=$((SECONDS + $1)); shift
  while [ $SECONDS -lt $end ]; do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
  return 1
}
# the ids of the running sandboxes (through cri-guard), one line, sorted
ready_sandboxes() { crictl pods --state ready -q 2>/dev/null | sort | tr '\n' ' '; }
running_containers() { crictl ps --state running -q 2>/dev/null | sort | tr '\n' ' '; }
