#!/usr/bin/env bash
# lib_test.sh: checks the helpers of scripts/lib.sh (make scripts-test; a few
# seconds). Needs neither root nor the harness: it touches no cgroup, mount,
# package or host path; apt-get, dpkg, flock, findmnt, umount, pgrep and go are
# shell functions here that record how they were called. The processes it
# stops are ones it starts itself. Exits 1 when a check fails.
# shellcheck disable=SC2031 # EPOCHREALTIME is set in subshells (ts_at) only
set -euo pipefail
here=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
LOG_PREFIX=libtest LOG_WIDTH=6
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"

tmp=$(mktemp -d /tmp/cri-guard-lib-test.XXXXXX)
started=()
cleanup() {
  local p
  for p in "${started[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
checks=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
# eq GOT WANT WHAT
eq() {
  checks=$((checks + 1))
  [ "$1" = "$2" ] || fail "$3: got $(printf %q "$1"), want $(printf %q "$2")"
}
# secs_since T: the seconds since the $EPOCHREALTIME T, as a decimal.
secs_since() { awk -v a="$EPOCHREALTIME" -v b="$1" 'BEGIN { printf "%.2f", a - b }'; }
# between X LO HI WHAT: LO <= X < HI (the bounds allow for a loaded machine).
between() {
  checks=$((checks + 1))
  awk -v x="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(x >= lo && x < hi) }' || fail "$4: $1 s, want [$2, $3)"
}
# start [-c COMM] PIDFILE CMD...: CMD in the background, a child of this shell
# (which reaps it when it dies; disowned: no job report), its PID in PIDFILE
# once it runs as COMM (default: CMD's name).
start() {
  local comm="" pidf p _
  if [ "$1" = -c ]; then comm=$2; shift 2; fi
  pidf=$1
  shift
  [ -n "$comm" ] || comm=$(basename "$1")
  "$@" >/dev/null 2>&1 </dev/null &
  p=$!
  disown "$p"
  started+=("$p")
  echo "$p" >"$pidf"
  for _ in $(seq 200); do
    [ "$(cat /proc/"$p"/comm 2>/dev/null)" = "${comm:0:15}" ] && return 0
    sleep 0.01
  done
  fail "start $*: not running as $comm"
}
gone() { local _; for _ in $(seq 100); do [ -d /proc/"$1" ] || return 0; sleep 0.02; done; return 1; }

# --- ts: the format of each caller, counted from T0; MSG as awk -v reads it.
ts_at() { # ts_at NOW T0 PREFIX WIDTH MSG...: ts's line at the time NOW
  # shellcheck disable=SC2030 # unset, it is a plain variable: NOW for ts
  (unset EPOCHREALTIME; EPOCHREALTIME=$1; T0=$2; LOG_PREFIX=$3; LOG_WIDTH=$4; shift 4; ts "$@") 2>&1
}
eq "$(ts_at 1000.25 990 rt 6 hello "two  words")" "[rt + 10.25s] hello two  words" "ts rt"
eq "$(ts_at 1000.25 990 compat 7 x)" "[compat +  10.25s] x" "ts width 7"
eq "$(ts_at 5.5 5 vm 7 y)" "[vm +   0.50s] y" "ts under a second"
eq "$(ts_at 123456.5 0 cluster 6 z)" "[cluster +123456.50s] z" "ts wider than its field"
eq "$(ts_at 2 1 rt 6 '50% done \t')" "$(printf '[rt +  1.00s] 50%% done \t')" "ts: a percent sign, awk's escapes"
eq "$( (ts now) 2>/dev/null)" "" "ts writes to stderr only"
line=$( (ts "since sourcing") 2>&1)
re='^\[libtest \+ *[0-9]+\.[0-9]{2}s\] since sourcing$'
[[ $line =~ $re ]] || fail "ts from T0: $line"
checks=$((checks + 1))

# --- die, need_root
rc=0
# shellcheck disable=SC2317 # not reached, unless die returns
out=$( (die "bad thing" happened; echo not reached) 2>&1) || rc=$?
eq "$rc" 1 "die's exit code"
eq "$out" "libtest.sh: bad thing happened" "die's message"
rc=0
out=$( (id() { echo 1000; }; need_root; echo not reached) 2>&1) || rc=$?
eq "$rc:$out" "1:libtest.sh: must run as root" "need_root, not root"
rc=0
out=$( (id() { echo 0; }; need_root; echo root) 2>&1) || rc=$?
eq "$rc:$out" "0:root" "need_root, root"

# --- alive
start "$tmp/sleep.pid" sleep 30
rc=0; alive "$tmp/sleep.pid" sleep || rc=$?
eq "$rc" 0 "alive: a running sleep"
rc=0; alive "$tmp/sleep.pid" sleeper || rc=$?
eq "$rc" 1 "alive: another command's name"
rc=0; alive "$tmp/none.pid" sleep || rc=$?
eq "$rc" 1 "alive: no pidfile"
: >"$tmp/empty.pid"
rc=0; alive "$tmp/empty.pid" sleep || rc=$?
eq "$rc" 1 "alive: an empty pidfile"
ln -s "$(command -v sleep)" "$tmp/kube-controller-manager"
start "$tmp/long.pid" "$tmp/kube-controller-manager" 30
rc=0; alive "$tmp/long.pid" kube-controller-manager || rc=$?
eq "$rc" 0 "alive: a name longer than the kernel keeps"
kill "$(cat "$tmp/long.pid")"
gone "$(cat "$tmp/long.pid")" || fail "kube-controller-manager (sleep) did not end"
rc=0; alive "$tmp/long.pid" kube-controller-manager || rc=$?
eq "$rc" 1 "alive: a process that ended"

# --- stop_pid
p=$(cat "$tmp/sleep.pid")
t=$EPOCHREALTIME
(stop_pid "$tmp/sleep.pid" sleep TERM)
between "$(secs_since "$t")" 0 3 "stop_pid: a process that ends on SIGTERM"
gone "$p" || fail "stop_pid: sleep $p still runs"
eq "$([ -e "$tmp/sleep.pid" ] && echo kept || echo removed)" removed "stop_pid: the pidfile"
# one that ignores SIGTERM: SIGKILL after SECONDS (in the background, checked
# below, while wait_for's timeout runs: the test takes a second less)
start -c sleep "$tmp/deaf.pid" bash -c 'trap "" TERM; exec sleep 30'
deaf=$(cat "$tmp/deaf.pid")
(t=$EPOCHREALTIME; stop_pid "$tmp/deaf.pid" sleep TERM 1; secs_since "$t" >"$tmp/deaf.secs") &
deaf_stop=$!
# a PID that is not COMM (reused): left alone, its pidfile removed
start "$tmp/other.pid" sleep 30
p=$(cat "$tmp/other.pid")
(stop_pid "$tmp/other.pid" containerd KILL)
eq "$([ -d /proc/"$p" ] && echo runs || echo killed)" runs "stop_pid: another command is not stopped"
eq "$([ -e "$tmp/other.pid" ] && echo kept || echo removed)" removed "stop_pid: its pidfile"
rc=0; (stop_pid "$tmp/none.pid" sleep TERM) || rc=$?
eq "$rc" 0 "stop_pid: no pidfile"

# --- wait_for
t=$EPOCHREALTIME
rc=0; (wait_for 1 false) || rc=$?
eq "$rc" 1 "wait_for: timed out"
between "$(secs_since "$t")" 0.9 4 "wait_for 1: its time"
(sleep 0.3; touch "$tmp/ready") &
t=$EPOCHREALTIME
rc=0; (wait_for 5 test -e "$tmp/ready") || rc=$?
eq "$rc" 0 "wait_for: succeeded"
between "$(secs_since "$t")" 0.2 4 "wait_for: as soon as it succeeds"
eq "$( (wait_for 1 echo visible) 2>&1)" "" "wait_for drops CMD's output"
start "$tmp/short.pid" sleep 0.3
t=$EPOCHREALTIME
rc=0; (wait_for -p "$tmp/short.pid" sleep 5 false) || rc=$?
eq "$rc" 2 "wait_for -p: the process ended"
between "$(secs_since "$t")" 0.2 4 "wait_for -p: as soon as it ends"
rc=0; (wait_for -p "$tmp/other.pid" sleep 5 true) || rc=$?
eq "$rc" 0 "wait_for -p: succeeded while it runs"
wait "$deaf_stop"
between "$(cat "$tmp/deaf.secs")" 0.9 6 "stop_pid: SIGKILL after 1 s, not 15"
gone "$deaf" || fail "stop_pid: SIGTERM-deaf sleep $deaf still runs"

# --- apt_need, apt-get and dpkg recorded
calls=$tmp/apt.calls
dpkg() { [ "$1" = -s ] && [[ $2 != missing* ]]; } # "removed" is known to dpkg -s
dpkg-query() { case ${!#} in present) printf 'install ok installed' ;; *) printf 'deinstall ok config-files' ;; esac; }
flock() { echo "flock $*" >>"$calls"; }
# apt-get fails its first N installs (APT_FAILS)
apt-get() {
  echo "apt-get [${DEBIAN_FRONTEND:-}] $*" >>"$calls"
  case " $* " in *" install "*) ;; *) return 0 ;; esac
  local n; n=$(cat "$tmp/apt.n" 2>/dev/null || echo 0); echo $((n + 1)) >"$tmp/apt.n"
  [ "$n" -ge "${APT_FAILS:-0}" ]
}
apt_case() { # apt_case FAILS PKG...: apt_need's rc, its stderr, then the calls
  rm -f "$calls" "$tmp/apt.n"; local rc=0 err
  err=$( (APT_FAILS=$1; shift; r=0; apt_need "$@" || r=$?
    echo "frontend=${DEBIAN_FRONTEND:-}" >>"$calls"; exit "$r") 2>&1 >/dev/null) || rc=$?
  echo "rc=$rc"
  # shellcheck disable=SC2001 # a regular expression: the seconds vary
  if [ -n "$err" ]; then sed 's/+ *[0-9.]*s\]/+Xs]/' <<<"$err"; fi
  cat "$calls" 2>/dev/null || true
}
unset DEBIAN_FRONTEND
L='-o DPkg::Lock::Timeout=600'
eq "$(apt_case 0 present removed)" "rc=0
frontend=" "apt_need: nothing missing (dpkg -s)"
# retry (the defaults, compat's): install; when it fails, update and install again
calls_retry="[libtest +Xs] apt-get install missing
flock 9
apt-get [noninteractive] $L install -y -q missing
apt-get [] $L update -q
apt-get [noninteractive] $L install -y -q missing
frontend="
eq "$(apt_case 1 present missing)" "rc=0
$calls_retry" "apt_need: retry after an update (compat)"
eq "$(apt_case 2 missing)" "rc=1
$calls_retry" "apt_need: the retry fails"
APT_INSTALLED=status APT_EXPORT_FRONTEND=1
eq "$(apt_case 0 present removed)" "rc=0
[libtest +Xs] apt-get install removed
flock 9
apt-get [noninteractive] $L install -y -q removed
frontend=noninteractive" "apt_need: dpkg-query's status, DEBIAN_FRONTEND exported (rt)"
APT_INSTALLED=known APT_EXPORT_FRONTEND=0 APT_UPDATE=first APT_INSTALL_OPTS=(--no-install-recommends)
calls_first="[libtest +Xs] apt-get install missing missing2
flock 9
apt-get [] $L update -q
apt-get [noninteractive] $L install -y -q --no-install-recommends missing missing2
frontend="
eq "$(apt_case 0 present missing missing2)" "rc=0
$calls_first" "apt_need: update first, no recommends (vm)"
eq "$(apt_case 1 missing missing2)" "rc=1
$calls_first" "apt_need: update first, the install fails"
APT_UPDATE=retry APT_INSTALL_OPTS=()
unset -f dpkg dpkg-query flock apt-get

# --- umount_under, rm_unmounted (findmnt and umount recorded)
mkdir -p "$tmp/m/a/b"
mounts="$tmp/m/a
/elsewhere
$tmp/m/a/b
$tmp/mm"
findmnt() { printf '%s\n' "$mounts"; }
umount() { echo "umount $*" >>"$tmp/umount.calls"; [ "$1" = -l ] || [ "$1" != "$tmp/m/a/b" ]; }
umount_under "$tmp/m"
eq "$(cat "$tmp/umount.calls")" "umount $tmp/m/a/b
umount -l $tmp/m/a/b
umount $tmp/m/a" "umount_under: below DIR/ only, deepest first, lazily when busy"
rc=0; out=$( (rm_unmounted "$tmp/m") 2>&1) || rc=$?
eq "$rc:$out" "1:libtest.sh: mounts left under $tmp/m; not removing it" "rm_unmounted: a mount left"
eq "$([ -d "$tmp/m/a/b" ] && echo kept || echo removed)" kept "rm_unmounted: DIR kept"
mounts="/elsewhere
$tmp/mm"
rm_unmounted "$tmp/m"
eq "$([ -e "$tmp/m" ] && echo kept || echo removed)" removed "rm_unmounted: no mount left"
unset -f findmnt umount

# --- kill_shims (pgrep recorded): only the shims among the PIDs it finds
ln -s "$(command -v sleep)" "$tmp/containerd-shim-runc-v2"
start "$tmp/shim.pid" "$tmp/containerd-shim-runc-v2" 30
start "$tmp/notshim.pid" sleep 30
pgrep() { echo "$*" >"$tmp/pgrep.args"; cat "$tmp/shim.pid" "$tmp/notshim.pid"; }
kill_shims "$tmp/c.sock"
unset -f pgrep
eq "$(cat "$tmp/pgrep.args")" "-f containerd-shim-runc-v2 .*-address $tmp/c.sock" "kill_shims: pgrep's pattern"
gone "$(cat "$tmp/shim.pid")" || fail "kill_shims: the shim still runs"
eq "$(alive "$tmp/notshim.pid" sleep && echo runs || echo killed)" runs "kill_shims: not a shim"

# --- cri_tools: nothing built when the tools are there; go recorded
mkdir -p "$tmp/tools"
TOOLS=$tmp/tools CRI_TOOLS=v1.37.0 GINKGO=v2.32.1
go() { echo "GOBIN=${GOBIN:-} go $*" >>"$tmp/go.calls"; }
printf '#!/bin/sh\necho "crictl version v1.37.0"\n' >"$TOOLS/crictl"
printf '#!/bin/sh\necho "Ginkgo Version 2.32.1"\n' >"$TOOLS/ginkgo"
printf '#!/bin/sh\n' >"$TOOLS/critest"
chmod +x "$TOOLS"/*
eq "$( (cri_tools) 2>&1)" "" "cri_tools: all there"
eq "$(cat "$tmp/go.calls" 2>/dev/null || true)" "" "cri_tools: no build"
printf '#!/bin/sh\necho "crictl version v1.36.0"\n' >"$TOOLS/crictl"
eq "$( (cri_tools) 2>&1 | sed 's/+ *[0-9.]*s\]/+Xs]/')" "[libtest +Xs] go install crictl v1.37.0" "cri_tools: another crictl"
eq "$(cat "$tmp/go.calls")" "GOBIN=$TOOLS go install -ldflags -X sigs.k8s.io/cri-tools/pkg/version.Version=v1.37.0 sigs.k8s.io/cri-tools/cmd/crictl@v1.37.0" "cri_tools: crictl's build"
unset -f go

# --- the files they write
mkdir -p "$tmp/s/proc/pressure"
fake_stats "$tmp/s"
eq "$(cat "$tmp/s/proc/meminfo")" "MemTotal:       16777216 kB
MemFree:        12582912 kB
MemAvailable:   12582912 kB
Buffers:        0 kB
Cached:         0 kB" "fake_stats: meminfo"
eq "$(cat "$tmp/s/proc/pressure/memory")" "some avg10=0.00 avg60=0.00 avg300=0.00 total=0
full avg10=0.00 avg60=0.00 avg300=0.00 total=0" "fake_stats: PSI"
mkdir -p "$tmp/c/cni/net.d"
cni_conflist "$tmp/c" net0 br0 10.0.0.0/24
eq "$(cat "$tmp/c/cni/net.d/10-net0.conflist")" '{"cniVersion": "0.4.0", "name": "net0", "plugins": [
  {"type": "bridge", "bridge": "br0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "'"$tmp"'/c/cni/ipam", "ranges": [[{"subnet": "10.0.0.0/24"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}' "cni_conflist"
registry_mirrors "$tmp/c" 127.0.0.1:5000
eq "$(cd "$tmp/c/certs.d" && find . -type f | sort | tr '\n' ' ')" \
  "./127.0.0.1:5000/hosts.toml ./docker.io/hosts.toml ./gcr.io/hosts.toml ./k8s.gcr.io/hosts.toml ./localhost:5000/hosts.toml ./registry.k8s.io/hosts.toml " \
  "registry_mirrors: the registries"
eq "$(cat "$tmp/c/certs.d/gcr.io/hosts.toml")" 'server = "https://gcr.io"

[host."http://127.0.0.1:5000"]
  capabilities = ["pull", "resolve"]
  skip_verify = true' "registry_mirrors: hosts.toml"

if [ "$fails" -gt 0 ]; then
  echo "lib_test.sh: $fails of $checks checks failed" >&2
  exit 1
fi
echo "lib_test.sh: $checks checks passed"
