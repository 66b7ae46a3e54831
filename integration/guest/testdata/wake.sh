# wake.sh THRESHOLD: housekeeping every 60 s (a restart: a reload applies only
# thresholds; the unit's WatchdogSec stays 30s: the loop pings the watchdog
# between passes), a hard threshold of THRESHOLD on allocatableMemory.available,
# then the runaway static pod of kubelet.sh (memhog.yaml): cri-guard must evict
# it from a pass that something other than the 60 s tick woke, before any OOM
# kill in kubepods.slice. The crossing is recorded apart from cri-guard, by one
# builtins-only loop (start_sampler). The config and cri-guard are restored
# on exit. key=value lines for the test.
. "$(dirname "$0")/common.sh"
D=$(dirname "$0")
P=$PODS
M=/etc/kubernetes/manifests
C=/etc/cri-guard/config.yaml
thr_arg=${1:?usage: wake.sh THRESHOLD (e.g. 300Mi)}
# wakeups PREFIX: cri_guard_wakeups_total by source, as PREFIX_SOURCE=N lines
wakeups() {
  local line
  while IFS= read -r line; do
    [[ $line =~ ^cri_guard_wakeups_total\{source=\"([^\"]+)\"\}\ ([0-9.e+]+)$ ]] && echo "$1_${BASH_REMATCH[1]}=${BASH_REMATCH[2]}"
  done < <(curl -s --max-time 20 http://127.0.0.1:9713/metrics)
}

restore() {
  rm -f "$M/memhog.yaml"
  [ -n "${SAMPLER:-}" ] && kill "$SAMPLER" 2>/dev/null
  [ -n "${FOLLOWER:-}" ] && kill "$FOLLOWER" 2>/dev/null
  # the hog's pod cgroup gone (the kubelet stopped it), before cri-guard restarts
  if [ -n "${uid:-}" ]; then
    local end=$((SECONDS + 120)) d=$P/kubepods-besteffort.slice/kubepods-besteffort-pod$uid.slice
    while [ -d "$d" ] && [ $SECONDS -lt $end ]; do pause 1; done
    echo "memhog_cgroup_gone=$([ -d "$d" ] && echo no || echo yes)"
  fi
  [ -e /tmp/wake-config.orig ] && install -m 0644 /tmp/wake-config.orig "$C"
  systemctl restart cri-guard
  echo "restored_housekeeping=$(cri-guard check-config "$C" | sed -n 's/^housekeepingInterval: //p')"
  echo "restored_active=$(systemctl is-active cri-guard)"
  crictl pods --name '^memhog-vm$' | sed 's/^/# after cleanup: /'
}
trap restore EXIT

# housekeeping 60 s: a restart (the unit's watchdog, 30 s, is left as shipped)
cp "$C" /tmp/wake-config.orig
sed -i -e 's/^housekeepingInterval: .*/housekeepingInterval: 60s/' \
  -e "s/^evictionHard: .*/evictionHard: {allocatableMemory.available: $thr_arg}/" "$C"
cri-guard check-config "$C" >/dev/null || { echo "config_error=yes"; exit 1; }
systemctl restart cri-guard
pid=$(mainpid); nrestarts=$(systemctl show -p NRestarts --value cri-guard)
echo "housekeeping=$(cri-guard check-config "$C" | sed -n 's/^housekeepingInterval: //p')"
echo "watchdog=$(systemctl show -p WatchdogUSec --value cri-guard)"
started=$(journalctl -u cri-guard --no-pager -o short-unix _PID="$pid" | grep -m1 'msg=serving' | cut -d' ' -f1)
echo "guard_started_at=$started"
journalctl -u cri-guard --no-pager -o cat _PID="$pid" | grep -E 'serving|psi trigger|memcg|notification|memory.events|fast' | sed 's/^/# guard start: /'

# Idle past the first tick (60 s after the start; no pass before it): longer
# than WatchdogSec, so the watchdog must be pinged between passes; the hog
# then grows in the second tick interval.
now=$EPOCHREALTIME; idle=$((${started%.*} + 65 - ${now%.*}))
[ "$idle" -gt 0 ] && pause "$idle"
echo "idle_s=$idle"

s=$(cri-guard status --json)
thr=$(jq -r '.signals[] | select(.signal == "allocatableMemory.available") | .thresholds[0].limit' <<<"$s")
echo "threshold=$(jq -r '.signals[] | select(.signal == "allocatableMemory.available") | .thresholds[0].value' <<<"$s")"
echo "threshold_bytes=$thr"
echo "pods_memory_max=$(cat $P/memory.max)"
echo "oom_kill_before=$(pods_event oom_kill)"
sed 's/^/# memory.events before: /' "$P/memory.events"
wakeups wakeups_before

start_sampler /tmp/wake-avail.txt
follow_guard /tmp/wake-guard.log
pause 1
cp "$D/memhog.yaml" "$M/memhog.yaml"
echo "memhog_added_at=$EPOCHREALTIME"
# UML faults memory in at a few MB/s: minutes. The decision, then its outcome.
wait_line /tmp/wake-guard.log '*msg="evicting pod"*pod=memhog-vm*' 600 || echo "# no 'evicting pod' for memhog-vm within 600s"
wait_line /tmp/wake-guard.log '*msg="pod evicted*pod=memhog-vm*' 120 || echo "# no 'pod evicted' for memhog-vm within 120s"
pause 2
kill "$SAMPLER"

grep -E 'evicting pod|pod evicted|eviction candidate|psi trigger|notification|memory.events|fast' /tmp/wake-guard.log | head -20 | sed 's/^/# guard: /'
dline=$(grep -m1 'msg="evicting pod".*pod=memhog-vm' /tmp/wake-guard.log)
echo "decision_at=${dline%% *}"
echo "decision=$(sed 's/^[^ ]* [^ ]* //' <<<"$dline")"
eline=$(grep -m1 'msg="pod evicted.*pod=memhog-vm' /tmp/wake-guard.log)
echo "evicted_at=${eline%% *}"
echo "evicted=$(sed 's/^[^ ]* [^ ]* //' <<<"$eline")"
[[ $dline =~ \ wakeup=\"?([^\" ]+) ]] && echo "wakeup=${BASH_REMATCH[1]}"
[[ $dline =~ \ armed_by=\"?([^\" ]+) ]] && echo "armed_by=${BASH_REMATCH[1]}"
[[ $dline =~ \ pod_uid=\"?([^\" ]+) ]] && uid=${BASH_REMATCH[1]}
echo "memhog_cgroup_seen=$([ -n "${uid:-}" ] && [ -d "$P/kubepods-besteffort.slice/kubepods-besteffort-pod$uid.slice" ] && echo yes || echo no)"
c=$(crossing /tmp/wake-avail.txt "$thr")
echo "above_at=${c% *}"
echo "crossed_at=${c#* }"
echo "min_available_mib=$(awk 'NR == 1 || $2 < m { m = $2 } END { print m }' /tmp/wake-avail.txt)"
echo "samples=$(wc -l </tmp/wake-avail.txt)"

echo "oom_kill_after=$(pods_event oom_kill)"
# one cri-guard all along: the watchdog did not kill it between housekeeping passes
echo "same_pid=$([ "$(mainpid)" = "$pid" ] && echo yes || echo "no: $pid then $(mainpid)")"
echo "nrestarts=$(( $(systemctl show -p NRestarts --value cri-guard) - nrestarts ))"
echo "watchdog_timeouts=$(journalctl -u cri-guard --no-pager -o cat --since "@${started%.*}" | grep -c 'Watchdog timeout')"
sed 's/^/# memory.events after: /' "$P/memory.events"
wakeups wakeups_after
echo "status_wakeup=$(cri-guard status --json | jq -r '[.decisions[] | select(.kind == "evict" and .pod.name == "memhog-vm")] | last | .wakeup // ""')"
j=$(crictl pods --name '^memhog-vm$' -o json)
jq -r '.items[] | "# memhog sandbox \(.id[:13]) attempt=\(.metadata.attempt) \(.state)"' <<<"$j"
echo "memhog_ready=$(jq '[.items[] | select(.state == "SANDBOX_READY")] | length' <<<"$j")"
echo "memhog_notready=$(jq '[.items[] | select(.state == "SANDBOX_NOTREADY")] | length' <<<"$j")"
echo "--- what the kubelet shows"
k=$(journalctl -u kubelet --no-pager -o cat --since "@${started%.*}" | grep memhog)
grep -iE 'error|fail|refus|evict|sandbox|kill' <<<"$k" | tail -6 | sed 's/^/# kubelet: /'
echo "kubelet_no_ready_sandbox=$(grep -c 'No ready sandbox for pod can be found' <<<"$k")"
echo "kubelet_saw_refusal=$(grep -c 'The node had condition: \[MemoryPressure\]' <<<"$k")"
