#!/usr/bin/env bash
# rt.sh: a private containerd for cri-guard's end-to-end tests.
#
#   scripts/rt.sh up                  start (or keep) the stack; idempotent
#   scripts/rt.sh down                undo everything `up` did
#   scripts/rt.sh stop-containerd     SIGKILL containerd (shims and pods survive)
#   scripts/rt.sh start-containerd    start containerd again with the same config
#   scripts/rt.sh restart-containerd  stop-containerd + start-containerd
#   scripts/rt.sh status              exit 0 when containerd and the registry are up
#   scripts/rt.sh up-events           start (or keep) the events instance; idempotent
#   scripts/rt.sh down-events         undo everything `up-events` did
#   scripts/rt.sh images DIR          build the test images (OCI archives) into DIR
#   scripts/rt.sh node-config DIR CGROUP REG SUBNET NETWORK
#                                     containerd's, CNI's and the registry's configs for another node's containerd
#
# The stack: containerd $CTRD and runc $RUNC built from their Go modules (by
# scripts/build-runtime.sh, the same build the UML guest of scripts/vm.sh runs;
# cached in $CACHE/vm), a CNI bridge ($BRIDGE, $SUBNET), a
# local docker-registry on $REG that stands in for every upstream registry (so
# PullImage works offline), crictl/critest/ginkgo built from Go modules, and the
# test images built offline by tools/mkimages. Everything lives under $RT
# (CRI_GUARD_RT, default /tmp/cri-guard-rt); containerd moves itself into the v1
# cgroups /$CG/containerd; pods should use cgroup parents under /$CG-pods.
# Tools are cached in $CACHE (CRI_GUARD_CACHE, default ~/.cache/cri-guard).
# `up` writes $RT/env (source it), $RT/crictl.yaml and $RT/test-images.yaml.
#
# The events instance is independent of the stack above (either may be up
# alone): containerd $CTRD_EVENTS, built from its Go module (1.7 is the first
# with GetContainerEvents; the events test needs 1.7's behaviour, each event
# given to one stream only), with Debian's runc, its own shim, root, state
# and socket under $RTE (CRI_GUARD_RT_EVENTS_DIR, default $RT-events), the v1
# cgroups /$CGE/containerd, no CNI (its pods must use the host network and
# cgroup parents under /$CGE-pods) and only the pause image, imported offline.
# `up-events` writes $RTE/env (it exports CRI_GUARD_RT_EVENTS, the socket).
set -euo pipefail

RT=${CRI_GUARD_RT:-/tmp/cri-guard-rt}
CG=cri-guard-rt
BRIDGE=criguard0
SUBNET=10.244.88.0/24
REG=127.0.0.1:5088
NET=cri-guard-rt
CRI_TOOLS=v1.37.0
GINKGO=v2.32.1 # the version cri-tools $CRI_TOOLS requires
CACHE=${CRI_GUARD_CACHE:-${HOME:-/root}/.cache/cri-guard}
TOOLS=$CACHE/tools-$CRI_TOOLS/bin
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MARK=$RT/.cri-guard-rt
CTRD_EVENTS=v1.7.35 # latest 1.7 on the module proxy; 1.7 is the first with GetContainerEvents
RTE=${CRI_GUARD_RT_EVENTS_DIR:-$RT-events}
CGE=cri-guard-rt-events
CTRD_BIN=$CACHE/containerd-$CTRD_EVENTS/bin
export CGO_ENABLED=0

LOG_PREFIX=rt LOG_WIDTH=6
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SRC/scripts/lib.sh" # ts, die, apt_need, alive, stop_pid, cg_kill, ...
# A package in state "deinstall ok config-files" is missing here; DEBIAN_FRONTEND
# stays exported for all that runs after an install.
APT_INSTALLED=status APT_EXPORT_FRONTEND=1

need_root

# shellcheck source-path=SCRIPTDIR source=build-runtime.sh
. "$SRC/scripts/build-runtime.sh" # CTRD, RUNC, CTRD_DIR, RUNC_DIR, build_containerd, build_runc
CTR=$CTRD_DIR/ctr
# ctr 2.x prints containerd's deprecation warnings on every call: up says them once.
export CONTAINERD_SUPPRESS_DEPRECATION_WARNINGS=1

tools() {
  mkdir -p "$TOOLS" "$CACHE/dl"
  cri_tools
  busybox
  mkdir -p "$RT/bin"
  for t in crictl critest ginkgo; do ln -sf "$TOOLS/$t" "$RT/bin/$t"; done
  image_helpers "$RT/bin"
}

# busybox: Debian's *dynamic* busybox: busybox-static runs applets even when masked.
busybox() {
  mkdir -p "$CACHE/dl"
  if [ ! -x "$CACHE/dl/bin/busybox" ]; then
    ts "apt-get download busybox"
    (cd "$CACHE/dl" && rm -f busybox_*.deb &&
      { apt-get download -q busybox >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get download -q busybox >/dev/null; }; } &&
      dpkg-deb -x busybox_*.deb .)
  fi
}

# image_helpers DIR: the images' binaries and tools/mkimages, built into DIR.
# mkimages is a module of its own (go-containerregistry stays out of the
# product's go.mod): built from its directory, into DIR made absolute first.
image_helpers() {
  ts "build images helpers + mkimages"
  (cd "$SRC" && for p in pause nnp fakenginx; do
    go build -trimpath -ldflags='-s -w' -o "$1/$p" "./tools/images/$p"
  done && go build -C tools/mkimages -o "$(realpath -m "$1")/mkimages" .)
}

# containerd_toml DIR CGROUP SHIM EXTRA: the config (version 2) of a private
# containerd 1.7 (the events instance) under DIR, in the v1 cgroup
# /CGROUP/containerd. SHIM, when not empty, is the runc shim binary to use;
# EXTRA (more TOML tables) is appended.
containerd_toml() {
  local dir=$1 cg=$2 shim=$3 extra=$4 shim_line=""
  [ -n "$shim" ] && shim_line="runtime_path = \"$shim\""
  cat >"$dir/containerd.toml" <<TOML
version = 2
root = "$dir/root"
state = "$dir/state"
[grpc]
  address = "$dir/containerd.sock"
[ttrpc]
  address = "$dir/containerd.sock.ttrpc"
[cgroup]
  # containerd moves itself (so its shims and containers) into these v1 cgroups:
  # relative cgroup paths must never land in the cgroup this shell runs in.
  path = "/$cg/containerd"
[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9"
  # root lacks CAP_SYS_RESOURCE here: without this every RunPodSandbox fails
  # with "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      $shim_line
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$dir/state/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni/net.d"
$extra
TOML
}

# containerd2_toml: the config of the stack's containerd $CTRD. Version 3, the
# dialect every 2.x reads (the guest's too; 2.3 migrates it to its version 4
# at start and logs so): the CRI plugin is split in io.containerd.cri.v1.runtime
# and .images, the CRI server's streaming settings stay in io.containerd.grpc.v1.cri.
containerd2_toml() {
  cat >"$RT/containerd.toml" <<TOML
version = 3
root = "$RT/root"
state = "$RT/state"
[grpc]
  address = "$RT/containerd.sock"
[ttrpc]
  address = "$RT/containerd.sock.ttrpc"
[cgroup]
  # containerd moves itself (so its shims and containers) into these v1 cgroups:
  # relative cgroup paths must never land in the cgroup this shell runs in.
  path = "/$CG/containerd"
[plugins.'io.containerd.internal.v1.opt']
  path = "$RT/opt"
# On by default in 2.x with a socket in /var/run/nri shared by the host: off.
[plugins.'io.containerd.nri.v1.nri']
  disable = true
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "registry.k8s.io/pause:3.9"
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "$RT/certs.d"
[plugins.'io.containerd.cri.v1.runtime']
  # root lacks CAP_SYS_RESOURCE here: without this every RunPodSandbox fails
  # with "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      # not whatever shim and runc are first in PATH (Debian's 1.6 ones, for up-events)
      runtime_path = "$CTRD_DIR/containerd-shim-runc-v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$RUNC_DIR/runc"
        Root = "$RT/state/runc"
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$RT/cni/net.d"
TOML
}

# node_config DIR CGROUP REG SUBNET NETWORK: the same containerd, CNI and
# registry configs for another containerd under DIR (scripts/cluster.sh's
# extra nodes: each in a network namespace of its own, where the registry
# is REG), in the v1 cgroups /CGROUP/containerd, its pods on SUBNET.
node_config() {
  local RT=$1 CG=$2
  mkdir -p "$RT"/{root,state,opt,cni/net.d,certs.d}
  containerd2_toml
  cni_conflist "$RT" "$5" "$BRIDGE" "$4"
  registry_mirrors "$RT" "$3"
}

configs() {
  mkdir -p "$RT"/{root,state,logs,opt,cni/net.d,certs.d,registry-data,images}
  containerd2_toml
  cni_conflist "$RT" "$NET" "$BRIDGE" "$SUBNET"
  registry_mirrors "$RT" "$REG"
  printf 'runtime-endpoint: unix://%s/containerd.sock\nimage-endpoint: unix://%s/containerd.sock\ntimeout: 30\n' \
    "$RT" "$RT" >"$RT/crictl.yaml"
  printf 'defaultTestContainerImage: registry.k8s.io/e2e-test-images/busybox:1.29-2\nwebServerTestImage: registry.k8s.io/e2e-test-images/nginx:1.14-2\n' \
    >"$RT/test-images.yaml"
  cat >"$RT/registry.yml" <<YML
version: 0.1
log: {level: warn, accesslog: {disabled: true}}
storage: {filesystem: {rootdirectory: $RT/registry-data}, delete: {enabled: true}}
http: {addr: $REG}
YML
  cat >"$RT/env" <<ENV
export CRI_GUARD_RT=$RT
export CONTAINERD_SOCK=$RT/containerd.sock
export CRI_CONFIG_FILE=$RT/crictl.yaml
export CRITEST_IMAGES=$RT/test-images.yaml
export CRI_GUARD_POD_CGROUP=/$CG-pods
export PATH=$RT/bin:\$PATH
ENV
}

start_containerd() {
  alive "$RT/containerd.pid" containerd && return 0
  rm -f "$RT/containerd.sock" "$RT/containerd.sock.ttrpc"
  # setsid: a Ctrl-C in the shell that ran `up` must not reach containerd.
  setsid "$CTRD_DIR/containerd" --config "$RT/containerd.toml" >>"$RT/logs/containerd.log" 2>&1 </dev/null &
  local p=$! i
  echo "$p" >"$RT/containerd.pid"
  # Wait on the PID, not on alive(): until setsid has exec'd containerd
  # the process is named after its parent, and on a loaded machine that
  # is long enough for a check of the name to give up on a containerd
  # that then comes up unrecorded, holding the metadata store's lock.
  for i in $(seq 600); do
    "$CTR" -a "$RT/containerd.sock" version >/dev/null 2>&1 && return 0
    [ -d /proc/"$p" ] || break
    sleep 0.1
  done
  # one that did not answer in time is stopped, so that none is left behind
  kill -9 "$p" 2>/dev/null || true
  rm -f "$RT/containerd.pid"
  tail -20 "$RT/logs/containerd.log" >&2
  die "containerd did not start (log: $RT/logs/containerd.log)"
}

stop_containerd() { stop_pid "$RT/containerd.pid" containerd KILL 10; }

# rm_shim_sockets: the sockets our shims left in /run/containerd/s (a shim that
# is killed, or whose start was cancelled, does not remove its own). Their
# names are containerd's sha256(<grpc address>/<namespace>/<id>) (pkg/shim
# SocketAddress): the ids are the task bundles left and every id in the log, so
# no other containerd's socket can match. Run when our shims are gone.
rm_shim_sockets() {
  local id h
  { ls "$RT/state/io.containerd.runtime.v2.task/k8s.io" 2>/dev/null || true
    grep -ohE '\b[0-9a-f]{64}\b' "$RT"/logs/containerd.log* 2>/dev/null || true; } | sort -u |
    while read -r id; do
      h=$(printf '%s' "$RT/containerd.sock/k8s.io/$id" | sha256sum)
      h=/run/containerd/s/${h%% *}
      if [ -S "$h" ]; then rm -f "$h"; fi
    done
}

up_ok() {
  alive "$RT/containerd.pid" containerd && alive "$RT/registry.pid" docker-registry &&
    "$CTR" -a "$RT/containerd.sock" version >/dev/null 2>&1 && curl -sf "http://$REG/v2/" >/dev/null
}

up() {
  if [ -f "$MARK" ] && up_ok; then
    ts "already up: source $RT/env"
    return 0
  fi
  [ -e "$RT" ] && down # stale leftovers of a killed run
  apt_need containernetworking-plugins docker-registry nftables iptables curl stress-ng
  command -v go >/dev/null || die "go is required"
  build_containerd
  build_runc
  mkdir -p "$RT" && touch "$MARK"
  tools
  configs
  # Saved before CNI touches them (the bridge plugin sets ip_forward=1,
  # portmap creates nat tables), restored by `down`.
  cat /proc/sys/net/ipv4/ip_forward >"$RT/ip_forward.orig"
  nft list tables >"$RT/nft-tables.orig" 2>/dev/null || true

  ts "registry"
  setsid docker-registry serve "$RT/registry.yml" >"$RT/logs/registry.log" 2>&1 </dev/null &
  echo $! >"$RT/registry.pid"
  local i
  for i in $(seq 100); do curl -sf "http://$REG/v2/" >/dev/null && break; sleep 0.1; done
  curl -sf "http://$REG/v2/" >/dev/null || die "registry did not start (log: $RT/logs/registry.log)"

  ts "images (build + push)"
  "$RT/bin/mkimages" -out "$RT/images" -pause "$RT/bin/pause" -busybox "$CACHE/dl/bin/busybox" \
    -nnp "$RT/bin/nnp" -fakenginx "$RT/bin/fakenginx" -push "$REG" >"$RT/logs/mkimages.log"

  ts "containerd"
  start_containerd
  for i in pause busybox; do "$CTR" -a "$RT/containerd.sock" -n k8s.io images import "$RT/images/$i.tar" >/dev/null; done
  # On this v1 host: io.containerd.deprecation/cgroup-v1 (removed by May 2029).
  "$CTR" -a "$RT/containerd.sock" deprecations list | awk 'NR > 1 { print "[rt] containerd deprecation: " $1 }' >&2
  ts "ready: source $RT/env   (crictl --config $RT/crictl.yaml ps)"
}

down() {
  [ -e "$RT" ] || return 0
  [ -f "$MARK" ] || die "$RT exists but was not made by rt.sh (no $MARK): not touching it"
  ts "down"
  if alive "$RT/containerd.pid" containerd && [ -x "$RT/bin/crictl" ]; then
    timeout 60 "$RT/bin/crictl" --config "$RT/crictl.yaml" rmp -af >/dev/null 2>&1 || true
  fi
  stop_pid "$RT/containerd.pid" containerd TERM 10
  stop_pid "$RT/registry.pid" docker-registry TERM 10
  kill_shims "$RT/containerd.sock" # leftover shims, by PID
  sleep 0.2
  rm_shim_sockets
  umount_under "$RT"
  cg_kill "$CG-pods" # the `runc init`s of cut-off creates (TestCrashRestore makes a few)
  cg_rmdir "$CG" "$CG-pods"
  ip link del "$BRIDGE" 2>/dev/null || true
  local fam
  for fam in ip ip6; do # nat tables that portmap created (absent before `up`)
    if [ -f "$RT/nft-tables.orig" ] && ! grep -qx "table $fam nat" "$RT/nft-tables.orig" &&
      nft list table "$fam" nat >/dev/null 2>&1; then
      nft delete table "$fam" nat 2>/dev/null || true
    fi
  done
  [ -f "$RT/ip_forward.orig" ] && cat "$RT/ip_forward.orig" >/proc/sys/net/ipv4/ip_forward
  rm -rf /var/lib/cni/results/"$NET"-* /var/lib/cni/networks/"$NET" 2>/dev/null || true
  rm_unmounted "$RT"
  ts "down done"
}

# events_tools: containerd and its runc shim at $CTRD_EVENTS. `go install
# pkg@version` refuses containerd's go.mod (exclude directives), so build inside
# the module cache copy, as for critest.
events_tools() {
  if ! "$CTRD_BIN/containerd" --version 2>/dev/null | grep -q " $CTRD_EVENTS " ||
    [ ! -x "$CTRD_BIN/containerd-shim-runc-v2" ]; then
    ts "build containerd $CTRD_EVENTS (cold: ~8 min, mostly module downloads)"
    local mod
    mod=$(cd /tmp && go mod download -json "github.com/containerd/containerd@$CTRD_EVENTS" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
    mkdir -p "$CTRD_BIN"
    (cd "$mod" &&
      go build -trimpath -tags 'no_btrfs no_devmapper no_zfs no_aufs' \
        -ldflags "-X github.com/containerd/containerd/version.Version=$CTRD_EVENTS" \
        -o "$CTRD_BIN/containerd.tmp" ./cmd/containerd &&
      go build -trimpath -o "$CTRD_BIN/containerd-shim-runc-v2.tmp" ./cmd/containerd-shim-runc-v2) &&
      mv "$CTRD_BIN/containerd-shim-runc-v2.tmp" "$CTRD_BIN/containerd-shim-runc-v2" &&
      mv "$CTRD_BIN/containerd.tmp" "$CTRD_BIN/containerd"
  fi
}

events_configs() {
  mkdir -p "$RTE"/{root,state,logs,opt,cni/net.d,bin,images}
  # NRI off; the CNI directory stays empty on purpose: host-network pods only.
  containerd_toml "$RTE" "$CGE" "$CTRD_BIN/containerd-shim-runc-v2" "[plugins.\"io.containerd.nri.v1.nri\"]
  disable = true"
  printf 'export CRI_GUARD_RT_EVENTS=%s/containerd.sock\nexport CRI_GUARD_RT_EVENTS_POD_CGROUP=/%s-pods\n' "$RTE" "$CGE" >"$RTE/env"
}

events_ok() {
  alive "$RTE/containerd.pid" containerd && ctr -a "$RTE/containerd.sock" version >/dev/null 2>&1
}

up_events() {
  if [ -f "$RTE/.cri-guard-rt-events" ] && events_ok; then
    ts "events instance already up: source $RTE/env"
    return 0
  fi
  [ -e "$RTE" ] && down_events
  apt_need runc containerd # runc, and ctr for the image import
  command -v go >/dev/null || die "go is required"
  events_tools
  mkdir -p "$RTE" && touch "$RTE/.cri-guard-rt-events"
  events_configs
  busybox
  image_helpers "$RTE/bin"
  ts "images (build)"
  "$RTE/bin/mkimages" -out "$RTE/images" -pause "$RTE/bin/pause" -busybox "$CACHE/dl/bin/busybox" \
    -nnp "$RTE/bin/nnp" -fakenginx "$RTE/bin/fakenginx" >"$RTE/logs/mkimages.log"
  ts "containerd $CTRD_EVENTS"
  rm -f "$RTE/containerd.sock" "$RTE/containerd.sock.ttrpc"
  setsid "$CTRD_BIN/containerd" --config "$RTE/containerd.toml" >>"$RTE/logs/containerd.log" 2>&1 </dev/null &
  local p=$! i
  echo "$p" >"$RTE/containerd.pid"
  for i in $(seq 600); do
    events_ok && break
    [ -d /proc/"$p" ] || break # on the PID: see start_containerd
    sleep 0.1
  done
  events_ok || { tail -20 "$RTE/logs/containerd.log" >&2; die "containerd $CTRD_EVENTS did not start (log: $RTE/logs/containerd.log)"; }
  ctr -a "$RTE/containerd.sock" -n k8s.io images import "$RTE/images/pause.tar" >/dev/null
  ts "events instance ready: source $RTE/env"
}

down_events() {
  [ -e "$RTE" ] || return 0
  [ -f "$RTE/.cri-guard-rt-events" ] || die "$RTE exists but was not made by rt.sh: not touching it"
  ts "down-events"
  if events_ok && [ -x "$TOOLS/crictl" ]; then
    timeout 60 "$TOOLS/crictl" --runtime-endpoint "unix://$RTE/containerd.sock" --image-endpoint "unix://$RTE/containerd.sock" \
      rmp -af >/dev/null 2>&1 || true
  fi
  stop_pid "$RTE/containerd.pid" containerd TERM 10
  local p
  for p in $(pgrep -f "containerd-shim-runc-v2 .*-address $RTE/containerd.sock( |$)" || true); do # leftover shims, by PID
    kill -9 "$p" 2>/dev/null || true
  done
  sleep 0.2
  umount_under "$RTE"
  cg_kill "$CGE-pods"
  cg_rmdir "$CGE" "$CGE-pods"
  rm_unmounted "$RTE"
  ts "down-events done"
}

case "${1:-}" in
up) up ;;
down) down ;;
stop-containerd) stop_containerd ;;
start-containerd) [ -f "$MARK" ] || die "not up"; start_containerd ;;
restart-containerd) stop_containerd; start_containerd ;;
status) up_ok ;;
up-events) up_events ;;
down-events) down_events ;;
node-config)
  [ $# = 6 ] || die "usage: $0 node-config DIR CGROUP REG SUBNET NETWORK"
  node_config "$2" "$3" "$4" "$5" "$6"
  ;;
images)
  # images DIR: the test images as OCI archives in DIR (for scripts/vm.sh), offline.
  [ -n "${2:-}" ] || die "usage: $0 images DIR"
  mkdir -p "$2/.helpers"
  busybox
  image_helpers "$2/.helpers"
  "$2/.helpers/mkimages" -out "$2" -pause "$2/.helpers/pause" -busybox "$CACHE/dl/bin/busybox" \
    -nnp "$2/.helpers/nnp" -fakenginx "$2/.helpers/fakenginx" >/dev/null
  rm -rf "$2/.helpers"
  ;;
*) die "usage: $0 up|down|restart-containerd|stop-containerd|start-containerd|status|up-events|down-events|images DIR|node-config DIR CGROUP REG SUBNET NETWORK" ;;
esac
