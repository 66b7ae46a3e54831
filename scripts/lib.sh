# shellcheck shell=bash
# lib.sh: sourced (not run) by the scripts beside it: the helpers they share,
# once. It sets no shell option (each caller has its own set -euo pipefail)
# and reads nothing from the environment: what differs between the callers is
# a variable each caller sets itself.
#
# Set before sourcing (die and need_root may run at once):
#   LOG_PREFIX   the caller's name: ts writes "[$LOG_PREFIX +  1.23s] MSG",
#                die "$LOG_PREFIX.sh: MSG"
#   LOG_WIDTH    the width of ts's seconds field (only a caller of ts)
# Defaults set here, a caller that differs sets its own after sourcing:
#   APT_INSTALLED        how apt_need judges a package present: "known"
#                        (dpkg -s succeeds: also a removed package whose
#                        conffiles remain) or "status" (dpkg-query says
#                        "install ok installed")
#   APT_UPDATE           "retry" (install; when that fails, apt-get update and
#                        install again) or "first" (update, then install)
#   APT_INSTALL_OPTS     more apt-get install options (an array)
#   APT_EXPORT_FRONTEND  1: apt_need exports DEBIAN_FRONTEND=noninteractive into
#                        the caller's shell (and so to all it runs afterwards);
#                        0: only apt-get install gets it
# T0 is the time lib.sh is sourced: ts counts from it.

T0=$EPOCHREALTIME
APT_INSTALLED=known
APT_UPDATE=retry
APT_INSTALL_OPTS=()
APT_EXPORT_FRONTEND=0

# ts MSG...: a line on stderr, the seconds since T0 and MSG.
ts() {
  awk -v a="$EPOCHREALTIME" -v b="$T0" -v m="$*" -v p="$LOG_PREFIX" -v w="$LOG_WIDTH" \
    'BEGIN { printf "[%s +%" w ".2fs] %s\n", p, a - b, m }' >&2
}

# die MSG...: MSG on stderr, exit 1.
die() { echo "$LOG_PREFIX.sh: $*" >&2; exit 1; }

need_root() { [ "$(id -u)" = 0 ] || die "must run as root"; }

# apt_need PKG...: install the Debian packages that are missing (see APT_*),
# one apt at a time: make test builds the guest (scripts/vm.sh) meanwhile, and
# vm.sh builds its kernel and image side by side.
apt_need() {
  local missing=() p
  for p in "$@"; do
    if [ "$APT_INSTALLED" = status ]; then
      dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    else
      dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    fi
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  ts "apt-get install ${missing[*]}"
  if [ "$APT_EXPORT_FRONTEND" = 1 ]; then export DEBIAN_FRONTEND=noninteractive; fi
  (flock 9
    if [ "$APT_UPDATE" = first ]; then
      apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q "${APT_INSTALL_OPTS[@]}" "${missing[@]}" >/dev/null
    else
      DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q "${APT_INSTALL_OPTS[@]}" "${missing[@]}" >/dev/null 2>&1 || {
        apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q "${APT_INSTALL_OPTS[@]}" "${missing[@]}" >/dev/null
      }
    fi) 9>/tmp/cri-guard-apt.lock
}

# alive PIDFILE COMM: the saved process runs and is COMM (the kernel keeps
# the first 15 characters of a command's name: so are they compared).
alive() {
  local p
  p=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$p" ] && [ "$(cat /proc/"$p"/comm 2>/dev/null)" = "${2:0:15}" ]
}

# stop_pid PIDFILE COMM SIGNAL [SECONDS]: stop the saved process, by PID only:
# SIGNAL, then SIGKILL when it still runs after SECONDS (default 15); the
# PIDFILE is removed (also when its process is not COMM: that one is left).
stop_pid() {
  local p _
  if alive "$1" "$2"; then
    p=$(cat "$1")
    kill -"$3" "$p" 2>/dev/null || true
    for _ in $(seq $((${4:-15} * 10))); do [ -d /proc/"$p" ] || break; sleep 0.1; done
    if [ -d /proc/"$p" ]; then kill -9 "$p" 2>/dev/null || true; fi
  fi
  rm -f "$1"
}

# wait_for [-p PIDFILE COMM] SECONDS CMD...: run CMD (its output dropped) every
# 0.2 s until it succeeds: 0; 1 when SECONDS pass first. With -p, 2 as soon as
# the process saved in PIDFILE is no longer COMM (checked after each failed try).
wait_for() {
  local pidf="" comm="" secs _
  if [ "$1" = -p ]; then pidf=$2 comm=$3; shift 3; fi
  secs=$1
  shift
  for _ in $(seq $((secs * 5))); do
    "$@" >/dev/null 2>&1 && return 0
    if [ -n "$pidf" ] && ! alive "$pidf" "$comm"; then return 2; fi
    sleep 0.2
  done
  return 1
}

# cg_make PATH: the cgroup PATH (relative to the roots) in every hierarchy; a
# new v1 cpuset gets the root's cpus and mems, or no process could join it.
cg_make() {
  local h d part
  for h in /sys/fs/cgroup/*/; do
    [ -f "$h/cgroup.procs" ] || continue
    d=${h%/}
    for part in ${1//\// }; do
      d=$d/$part
      [ -d "$d" ] || mkdir "$d"
      if [ -f "$d/cpuset.cpus" ] && [ -z "$(cat "$d/cpuset.cpus")" ]; then
        cat "${h%/}/cpuset.cpus" >"$d/cpuset.cpus" && cat "${h%/}/cpuset.mems" >"$d/cpuset.mems"
      fi
    done
  done
}

# cg_kill PATH: SIGKILL, by PID, the processes still in the cgroup PATH (every
# hierarchy) and below, this shell excepted. Our cgroups hold only ours: a
# `runc init` whose create a killed caller cut off waits forever for its
# start and keeps its cgroup.
cg_kill() {
  local c p
  for c in /sys/fs/cgroup/*/"$1"; do
    if [ -d "$c" ]; then find "$c" -name cgroup.procs -exec cat {} + 2>/dev/null || true; fi
  done | sort -u | while read -r p; do
    if [ "$p" != $$ ]; then kill -9 "$p" 2>/dev/null || true; fi
  done
  sleep 0.2
}

# cg_rmdir PATH...: remove the cgroups PATH and below in every hierarchy (what
# still holds a process stays).
cg_rmdir() {
  local path c
  for path in "$@"; do
    for c in /sys/fs/cgroup/*/"$path"; do
      [ -d "$c" ] && { find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null || true; }
    done
  done
  return 0
}

# launch PIDFILE LOG CGROUP CMD...: CMD in the background, in the cgroups
# CGROUP of every hierarchy (it joins them before its exec), detached from this
# shell (setsid; stdin /dev/null), its PID in PIDFILE, its output appended to LOG.
launch() {
  local pidf=$1 log=$2 cg=$3
  shift 3
  cg_make "$cg"
  # shellcheck disable=SC2016 # expanded by the inner bash: $0 is the cgroup, $$ its PID
  setsid bash -c 'for h in /sys/fs/cgroup/*/; do
      if [ -f "$h$0/cgroup.procs" ]; then echo $$ >"$h$0/cgroup.procs"; fi; done; exec "$@"' \
    "$cg" "$@" >>"$log" 2>&1 </dev/null &
  echo $! >"$pidf"
}

# umount_under DIR: every mount below DIR/, the deepest first (lazily when busy).
umount_under() {
  { findmnt -rn -o TARGET | grep "^$1/" || true; } | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" || true
  done
}

# rm_unmounted DIR: rm -rf DIR; die instead when a mount is left below it.
rm_unmounted() {
  if findmnt -rn -o TARGET | grep -q "^$1/"; then
    die "mounts left under $1; not removing it"
  fi
  rm -rf "$1"
}

# kill_shims SOCKET: SIGKILL, by PID, the runc shims left serving the
# containerd of SOCKET. Only shims: a shell whose command line holds the
# pattern matches it too.
kill_shims() {
  local p
  for p in $(pgrep -f "containerd-shim-runc-v2 .*-address $1" || true); do
    if [ "$(cat /proc/"$p"/comm 2>/dev/null)" = containerd-shim ]; then kill -9 "$p" 2>/dev/null || true; fi
  done
}

# kubelet_dirs_note DIR: which of the two fixed host directories a kubelet
# uses whatever its --root-dir do not exist yet, in DIR/made-host-dirs, for
# kubelet_dirs_clean.
kubelet_dirs_note() {
  local d
  for d in /var/log/containers /var/lib/kubelet; do [ -d $d ] || echo $d >>"$1/made-host-dirs"; done
}

# kubelet_dirs_clean DIR: what a kubelet of DIR left in those host directories
# (its container log links, its device plugin socket), and the directories
# kubelet_dirs_note found missing.
kubelet_dirs_clean() {
  if [ -d /var/log/containers ]; then
    find /var/log/containers -maxdepth 1 -lname "$1/*" -delete 2>/dev/null || true
  fi
  rm -f /var/lib/kubelet/device-plugins/kubelet.sock
  local d
  for d in $(cat "$1/made-host-dirs" 2>/dev/null || true); do
    rmdir "$d/device-plugins" 2>/dev/null || true
    rmdir "$d" 2>/dev/null || true
  done
}

# cri_tools: crictl, critest and ginkgo of cri-tools $CRI_TOOLS (ginkgo
# $GINKGO, the version it requires) into $TOOLS, each unless already there.
cri_tools() {
  mkdir -p "$TOOLS"
  if ! "$TOOLS/crictl" --version 2>/dev/null | grep -q "${CRI_TOOLS#v}"; then
    ts "go install crictl $CRI_TOOLS"
    GOBIN=$TOOLS go install -ldflags "-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRI_TOOLS" \
      "sigs.k8s.io/cri-tools/cmd/crictl@$CRI_TOOLS"
  fi
  if [ ! -x "$TOOLS/critest" ]; then # a test binary: go test -c inside the module
    ts "build critest $CRI_TOOLS"
    local mod
    mod=$(cd /tmp && go mod download -json "sigs.k8s.io/cri-tools@$CRI_TOOLS" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
    (cd "$mod" && go test -c -o "$TOOLS/critest.tmp" ./cmd/critest) && mv "$TOOLS/critest.tmp" "$TOOLS/critest"
  fi
  if ! "$TOOLS/ginkgo" version 2>/dev/null | grep -q "${GINKGO#v}"; then # for critest --parallel
    ts "go install ginkgo $GINKGO"
    GOBIN=$TOOLS go install "github.com/onsi/ginkgo/v2/ginkgo@$GINKGO"
  fi
}

# fake_stats DIR: the fake stats tree a test cri-guard reads (procRoot
# DIR/proc; tests rewrite meminfo for pressure): 16 GiB of memory, 12 GiB
# available, no PSI stall. DIR/proc/pressure must exist.
fake_stats() {
  printf 'MemTotal:       16777216 kB\nMemFree:        12582912 kB\nMemAvailable:   12582912 kB\nBuffers:        0 kB\nCached:         0 kB\n' \
    >"$1/proc/meminfo"
  printf 'some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n' \
    >"$1/proc/pressure/memory"
}

# cni_conflist DIR NET BRIDGE SUBNET: DIR/cni/net.d/10-NET.conflist, the CNI
# network NET: a bridge BRIDGE (the gateway, no masquerade) with addresses of
# SUBNET kept under DIR/cni/ipam, and portmap.
cni_conflist() {
  cat >"$1/cni/net.d/10-$2.conflist" <<JSON
{"cniVersion": "0.4.0", "name": "$2", "plugins": [
  {"type": "bridge", "bridge": "$3", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$1/cni/ipam", "ranges": [[{"subnet": "$4"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
JSON
}

# registry_mirrors DIR REG: DIR/certs.d (containerd's registry config_path):
# every upstream registry the tests name is pulled from the local registry REG.
registry_mirrors() {
  local r
  for r in registry.k8s.io k8s.gcr.io gcr.io docker.io localhost:5000 "$2"; do
    mkdir -p "$1/certs.d/$r"
    printf 'server = "https://%s"\n\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n  skip_verify = true\n' \
      "$r" "$2" >"$1/certs.d/$r/hosts.toml"
  done
}
