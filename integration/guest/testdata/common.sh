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

# The pods cgroup (the kubelet's, systemd driver) and its figures.
PODS=/sys/fs/cgroup/kubepods.slice
# pods_event KEY: that counter of the pods cgroup's memory.events (the
# cgroup's and its descendants': oom_kill counts the pods' OOM kills).
pods_event() { local k v; while read -r k v; do [ "$k" = "$1" ] && echo "$v"; done <"$PODS/memory.events"; }
# pause SECS: sleep without a process (a read that times out on a fifo
# nobody writes, opened once).
pause() {
  if [ -z "${PAUSE_FD:-}" ]; then
    mkfifo "/run/pause.$BASHPID"; exec {PAUSE_FD}<>"/run/pause.$BASHPID"; rm -f "/run/pause.$BASHPID"
  fi
  read -r -t "$1" -u "$PAUSE_FD" _ || :
}
# start_sampler FILE: one background loop (builtins only) appends
# "EPOCHREALTIME MiB bytes" to FILE every 100 ms: allocatableMemory.available
# of the pods cgroup as cri-guard computes it (memory.max - (memory.current -
# inactive_file)); its pid in $SAMPLER.
start_sampler() {
  ( local max cur ina k v
    read -r max <"$PODS/memory.max"
    while :; do
      read -r cur <"$PODS/memory.current"; ina=0
      while read -r k v; do [ "$k" = inactive_file ] && { ina=$v; break; }; done <"$PODS/memory.stat"
      echo "$EPOCHREALTIME $(( (max - cur + ina) >> 20 )) $((max - cur + ina))"
      pause 0.1
    done ) >"$1" 2>/dev/null &
  SAMPLER=$!
}
# crossing FILE BYTES: "ABOVE BELOW", the times of the sampler's last
# reading at or over BYTES and its first under: the crossing lies between.
crossing() { awk -v t="$2" '$3 < t { print p, $1; exit } { p = $1 }' "$1"; }
# crossed_at FILE BYTES: the time of the sampler's first reading under BYTES.
crossed_at() { local c; c=$(crossing "$@"); echo "${c#* }"; }
# follow_guard FILE: cri-guard's journal from now on into FILE (one
# journalctl; short-unix: the first field is the time); its pid in $FOLLOWER.
follow_guard() {
  journalctl -u cri-guard -f -n 0 -o short-unix --no-pager >"$1" 2>&1 &
  FOLLOWER=$!
}
# wait_line FILE GLOB SECS: read FILE as it grows (builtins: one descriptor
# kept open, a pause at its end) until a line matches the bash pattern GLOB
# (0) or SECS pass (1).
wait_line() {
  local fd line= chunk end=$((SECONDS + $3))
  exec {fd}<"$1"
  while :; do
    if IFS= read -r chunk <&"$fd"; then
      line+=$chunk
      # shellcheck disable=SC2053 # GLOB is a pattern
      [[ $line == $2 ]] && { exec {fd}<&-; return 0; }
      line=
    else
      line+=$chunk
      [ $SECONDS -lt "$end" ] || { exec {fd}<&-; return 1; }
      pause 0.2
    fi
  done
}
