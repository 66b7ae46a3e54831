# The README's "First run on a node", as a newcomer follows it (TestGuestReadme
# generates readme-steps.sh from README.md): its roll back on the provisioned
# node, the package purged, then the first run, each command timed, until the
# kubelet runs its pods through cri-guard. Leaves the node as provisioned
# (the package installed, the guest's config, the kubelet's drop-in).
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/readme-steps.sh"
SOCK=/run/cri-guard/cri-guard.sock
DIRECT=unix:///run/containerd/containerd.sock
# run_step CMD: run a README command as written (in a directory whose bin/
# holds the package, where `make deb` leaves it); its time and exit.
run_step() {
  local t0=$EPOCHREALTIME out rc
  out=$(cd /tmp/readme && eval "$1" 2>&1); rc=$?
  sed 's/^/#   /' <<<"$out" | head -40
  awk -v a="$EPOCHREALTIME" -v b="$t0" -v c="$1" -v r="$rc" 'BEGIN { printf "step=%6.2fs exit %d: %s\n", a - b, r, c }'
  return "$rc"
}
skip_step() { echo "step=  skipped: $1 ($2)"; }
# edit_step: the config edit the README asks for (podsCgroup and thresholds
# for this node): the guest's config, as provisioning installs it.
edit_step() {
  install -m 0644 /vm/guest/cri-guard.yaml /etc/cri-guard/config.yaml
  echo "step=  edited /etc/cri-guard/config.yaml (the guest's config)"
}
# static_ready ENDPOINT: the kubelet's ready sandboxes seen through ENDPOINT
static_ready() { crictl --runtime-endpoint "$1" pods --state ready -q 2>/dev/null | wc -l; }
kubelet_endpoint() { tr '\0' '\n' </proc/"$(systemctl show -p MainPID --value kubelet)"/cmdline | grep -c -- "--container-runtime-endpoint=unix://$SOCK"; }

mkdir -p /tmp/readme/bin
cp "$(ls /vm/deb/cri-guard_*_amd64.deb | grep -v '+upgrade' | head -1)" /tmp/readme/bin/
before=$(static_ready "unix://$SOCK")
echo "ready_before=$before"

echo "# roll back"
readme_rollback || echo "rollback_failed=yes"
DEBIAN_FRONTEND=noninteractive dpkg -P cri-guard 2>&1 | sed 's/^/# /'
wait_for 120 sh -c "[ \"\$(crictl --runtime-endpoint $DIRECT pods --state ready -q | wc -l)\" -ge $before ]"
echo "rolled_back=$([ "$(kubelet_endpoint)" = 0 ] && ! dpkg -s cri-guard >/dev/null 2>&1 && [ ! -e /etc/cri-guard ] && echo yes || echo no)"
direct=$(static_ready "$DIRECT")
echo "direct_sandboxes=$direct"
echo "direct_sandboxes_ok=$([ "$direct" -ge "$before" ] && [ "$before" -ge 2 ] && echo yes || echo no)"

echo "# first run"
t0=$EPOCHREALTIME
readme_first_run || echo "first_run_failed=yes"
# the kubelet's pods through cri-guard: the kubelet started with its socket,
# calling it (its runtime status checks, which no command here makes, counted
# in cri-guard's metrics), and every pod ready there again
wait_for 180 sh -c "[ \"\$(tr '\0' '\n' </proc/\$(systemctl show -p MainPID --value kubelet)/cmdline | grep -c -- unix://$SOCK)\" = 1 ] &&
  curl -s --max-time 20 http://127.0.0.1:9713/metrics | grep -q '^cri_guard_cri_request_duration_seconds_count{method=\"/runtime.v1.RuntimeService/Status\"}' &&
  [ \"\$(crictl --runtime-endpoint unix://$SOCK pods --state ready -q | wc -l)\" -ge $before ]" || echo "through_wait=timed out"
awk -v a="$EPOCHREALTIME" -v b="$t0" 'BEGIN { printf "first_run_seconds=%.1f\n", a - b }'
through=$(static_ready "unix://$SOCK")
echo "ready_through_cri_guard=$through"
echo "through_cri_guard=$([ "$(kubelet_endpoint)" = 1 ] && [ "$through" -ge "$before" ] && echo yes || echo no)"
cri-guard status >/tmp/readme/status 2>&1; echo "status_exit=$?"
# the edited config is the one running: cri-guard warns when a reload met
# changes only a restart applies (the critical rules, the pods cgroup, ...)
echo "restart_needed=$(journalctl -u cri-guard --no-pager -o cat --since "@${t0%.*}" | grep -c 'need a restart')"
sed 's/^/# status: /' /tmp/readme/status | head -30
