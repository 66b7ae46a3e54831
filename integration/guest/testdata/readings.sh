# cri-guard's v2 readings against the files themselves: node memory.available
# as the kubelet computes it on cgroup v2 (capacity MemTotal, working set =
# usage - inactive_file of the root cgroup, usage MemTotal - MemFree as runc
# has it for a root without memory.current), allocatableMemory.available of
# kubepods.slice, each pod's working set from its pod slice, the pods
# cgroup's PSI. Files are read just before and just after cri-guard's status.
. "$(dirname "$0")/common.sh"
P=/sys/fs/cgroup/kubepods.slice
stat() { local k v; while read -r k v; do [ "$k" = "$2" ] && { echo "$v"; return; }; done <"$1/memory.stat"; echo 0; }
mi() { local k v u; while read -r k v u; do [ "$k" = "$1:" ] && { echo $((v * 1024)); return; }; done </proc/meminfo; }
files() {
  local total free ina cur max
  total=$(mi MemTotal); free=$(mi MemFree); ina=$(stat /sys/fs/cgroup inactive_file)
  echo "$1_node_available=$((total - (total - free - ina)))"
  read -r cur <"$P/memory.current"; read -r max <"$P/memory.max"
  echo "$1_alloc_available=$((max - (cur - $(stat $P inactive_file))))"
  echo "$1_pods_psi=$(sed -n 's/^some avg10=\([0-9.]*\).*/\1/p' $P/memory.pressure)"
  echo "$1_root_has_memory_current=$([ -e /sys/fs/cgroup/memory.current ] && echo yes || echo no)"
  local d uid
  for d in $P/kubepods-*.slice/kubepods-*-pod*.slice $P/kubepods-pod*.slice; do
    [ -d "$d" ] || continue
    uid=${d##*-pod}; uid=${uid%.slice}; uid=${uid//_/-}
    read -r cur <"$d/memory.current"
    echo "$1_pod_ws_$uid=$((cur - $(stat "$d" inactive_file)))"
  done
}
# Pods are ranked with their stats by a housekeeping pass (every 10 s):
# right after a restart of cri-guard (the systemd tests' SIGKILL) status
# has none yet. Wait for a pass that ranked a pod (bounded).
ranked() { cri-guard status --json | jq -e '[.pods[] | select(.hasStats)] | length > 0' >/dev/null; }
wait_for 30 ranked || echo "# no pass ranked a pod with stats within 30 s"
files before
s=$(cri-guard status --json)
files after
echo "source=$(jq -r .source <<<"$s")"
echo "guard_node_available=$(jq -r '.signals[] | select(.signal == "memory.available") | .value' <<<"$s")"
echo "guard_alloc_available=$(jq -r '.signals[] | select(.signal == "allocatableMemory.available") | .value' <<<"$s")"
echo "guard_pods_psi=$(jq -r '.signals[] | select(.signal == "memory.pressure.some.avg10") | .value' <<<"$s")"
jq -r '.pods[] | select(.hasStats) | "guard_pod_ws_\(.uid)=\(.workingSetBytes)"' <<<"$s"
jq -r '.pods[] | "# pod \(.namespace)/\(.name) uid=\(.uid) qos=\(.qos) hasStats=\(.hasStats) ws=\(.workingSetBytes)"' <<<"$s"
jq -r '.signals[] | "# signal \(.signal) = \(.value)"' <<<"$s"
