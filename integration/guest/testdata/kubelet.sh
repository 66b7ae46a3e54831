# The kubelet (systemd driver, its runtime endpoint cri-guard's socket through
# the package's drop-in) runs a runaway static pod: cri-guard evicts it before
# the kernel's OOM killer, keeps the critical static pod, refuses a BestEffort
# pod while the pressure lasts. key=value lines for the test.
. "$(dirname "$0")/common.sh"
D=$(dirname "$0")
P=$PODS
M=/etc/kubernetes/manifests
echo "kubelet=$(kubelet --version)"
echo "pods_memory_max=$(cat $P/memory.max)"
echo "oom_kill_before=$(pods_event oom_kill)"
echo "critical_before=$(crictl pods --name '^critical-vm$' --state ready -q | head -1)"
cat "$P/memory.events" | sed 's/^/# memory.events before: /'

# allocatableMemory.available of the pods cgroup every 100 ms, with builtins only.
start_sampler /tmp/avail.txt
follow_guard /tmp/guard.log
sleep 1
cp "$D/memhog.yaml" "$M/memhog.yaml"; t0=$EPOCHREALTIME
echo "memhog_added_at=$t0"
# Wait for the eviction (UML faults memory in at a few MB/s: minutes).
wait_line /tmp/guard.log '*pod evicted*pod=memhog-vm*' 600
pause 2
kill $SAMPLER
grep -E 'evicting pod|pod evicted|eviction candidate|psi|fast|notif' /tmp/guard.log | grep -v '^$' | head -20 | sed 's/^/# guard: /'
thr=$(cri-guard status --json | jq -r '.signals[] | select(.signal == "allocatableMemory.available") | .thresholds[0].limit')
thr_mib=$(awk -v b="$thr" 'BEGIN { printf "%d", b / 1048576 }')
echo "threshold_mib=$thr_mib"
echo "crossed_at=$(crossed_at /tmp/avail.txt "$thr")"
echo "min_available_mib=$(awk 'NR == 1 || $2 < m { m = $2 } END { print m }' /tmp/avail.txt)"
echo "decision_at=$(grep -m1 'evicting pod.*pod=memhog-vm' /tmp/guard.log | awk '{print $1}')"
echo "evicted_at=$(grep -m1 'pod evicted.*pod=memhog-vm' /tmp/guard.log | awk '{print $1}')"
echo "decision=$(grep -m1 'evicting pod.*pod=memhog-vm' /tmp/guard.log | sed 's/^[^ ]* [^ ]* //')"
s=$(cri-guard status --json)
jq -r '.decisions[] | "# decision: \(.time // "") \(.kind) \(.pod // .name // "") \(.message // "")"' <<<"$s" | tail -8
echo "evict_decisions=$(jq '[.decisions[] | select(.kind == "evict")] | length' <<<"$s")"
echo "memhog_ready=$(crictl pods --name '^memhog-vm$' --state ready -q | wc -l)"
echo "oom_kill_after=$(pods_event oom_kill)"
cat "$P/memory.events" | sed 's/^/# memory.events after: /'
echo "critical_after=$(crictl pods --name '^critical-vm$' --state ready -q | head -1)"
echo "conditions=$(jq -r '.conditions | join(",")' <<<"$s")"

# Under pressure (the transition period holds it), a new BestEffort pod is refused.
cp "$D/late.yaml" "$M/late.yaml"
wait_line /tmp/guard.log '*pod sandbox refused*pod=late-vm*' 120
echo "late_refused=$(grep -m1 'pod sandbox refused.*pod=late-vm' /tmp/guard.log | sed 's/^[^ ]* [^ ]* //')"
echo "late_sandboxes=$(crictl pods --name '^late-vm$' -q | wc -l)"
echo "memhog_refused_again=$(grep -c 'pod sandbox refused.*pod=memhog-vm' /tmp/guard.log)"
echo "--- what the kubelet shows"
journalctl -u kubelet --no-pager -o cat --since "@${t0%.*}" | grep -E 'memhog|late' | grep -iE 'error|fail|refus|evict|sandbox' | tail -8 | sed 's/^/# kubelet: /'
echo "kubelet_saw_refusal=$(journalctl -u kubelet --no-pager -o cat --since "@${t0%.*}" | grep -c 'The node had condition: \[MemoryPressure\]')"
crictl pods | sed 's/^/# /'
kill $FOLLOWER
rm -f "$M/memhog.yaml" "$M/late.yaml"
wait_for 120 sh -c "[ -z \"\$(crictl pods --name '^(memhog-vm|late-vm)\$' -q)\" ]" || echo "# memhog/late sandboxes still listed"
