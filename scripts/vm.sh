#!/usr/bin/env bash
# vm.sh: the platform users run (cgroup v2, systemd as PID 1, containerd 2.x, a
# current kubelet, cri-guard installed from its .deb) in a User-mode Linux guest.
#
#   scripts/vm.sh build                 build (or keep) everything the guest needs
#   scripts/vm.sh prebuild              the long builds (kernel, image, containerd, runc):
#                                       make test starts it first
#   scripts/vm.sh up                    build, boot the guest, provision it; idempotent
#   scripts/vm.sh exec [-t SECS] -- CMD run CMD (a shell command line) in the guest as
#                                       root: its output, its exit code (124: timed out)
#   scripts/vm.sh cp FILE               make a host file visible in the guest (prints its path there)
#   scripts/vm.sh down                  power the guest off; nothing is left on the host
#   scripts/vm.sh status                exit 0 when the guest is up and answers
#
# Why UML: the CI hosts' /dev/kvm is a PVM device on which stock kernels do
# not boot, its own cgroup2 has no memory controller, and systemd must never be
# PID 1 on the host's file system. A User-mode Linux kernel is an ordinary
# process with a kernel of its own: there systemd 252 boots on pure cgroup v2.
#
# Built once and cached in $VMC ($CACHE/vm, CRI_GUARD_CACHE as for rt.sh):
#   linux-<key>            the UML kernel from Debian's linux-source-6.1 with
#                          scripts/vm/kernel.options (key: their hash)
#   disk-<key>.ext4        a debootstrapped Debian 12 with systemd, the CNI plugins
#                          and vm-agent (key: scripts/vm/image/*)
#   containerd-$CTRD/ runc-$RUNC/  built from their Go modules by
#                          scripts/build-runtime.sh (the host harness runs the same build)
# and the kubelet of scripts/cluster.sh build (one Kubernetes release for the
# cluster and the guest) and the crictl of scripts/rt.sh. cri-guard is packaged by `make deb` on every build.
#
# At run time everything lives under $VM (CRI_GUARD_VM, default /tmp/cri-guard-vm):
# the copy-on-write layer over the cached image (each boot starts clean), the
# console log, and $VM/share, the directory the guest mounts over hostfs on
# /vm: the binaries, the .deb, the configs of scripts/vm/guest and the exec
# queue of vm-agent. The guest's RAM is a file UML unlinks at once under
# /dev/shm. `down` removes $VM. The guest has no network to the host.
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VM=${CRI_GUARD_VM:-/tmp/cri-guard-vm}
CACHE=${CRI_GUARD_CACHE:-${HOME:-/root}/.cache/cri-guard}
VMC=$CACHE/vm
CRI_TOOLS=v1.37.0
VM_MEM=${CRI_GUARD_VM_MEM:-2560M}
SHARE=$VM/share
# The release the package test upgrades from: the last one before the
# hardened unit, the maintainer scripts' checks and the start-up that
# serves degraded, so the upgrade crosses all of them.
PREV_RELEASE=${CRI_GUARD_PREV_RELEASE:-4bd6c1bda646729d26bdadd7f77e67c5f4ced620}
MARK=$VM/.cri-guard-vm

LOG_PREFIX=vm LOG_WIDTH=7
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SRC/scripts/lib.sh" # ts, die, apt_need
# apt_need here: apt-get update before every install, no recommended packages.
APT_UPDATE=first APT_INSTALL_OPTS=(--no-install-recommends)
need_root
# shellcheck source-path=SCRIPTDIR source=build-runtime.sh
. "$SRC/scripts/build-runtime.sh" # CTRD, RUNC, build_containerd, build_runc

kernel_key() { cat "$SRC/scripts/vm/kernel.options" | sha256sum | cut -c1-12; }
image_key() { cat "$SRC"/scripts/vm/image/* | sha256sum | cut -c1-12; }

# build_kernel: Debian's linux-source-6.1, make ARCH=um, no modules.
build_kernel() {
  local out=$VMC/linux-$(kernel_key) w=$VMC/kernel-build
  [ -x "$out" ] && return 0
  apt_need make gcc libc6-dev flex bison bc xz-utils
  rm -rf "$w"; mkdir -p "$w"
  ts "kernel: fetch linux-source-6.1"
  (cd "$w" && apt-get download -q linux-source-6.1 >/dev/null && dpkg-deb -x linux-source-6.1_*.deb deb &&
    tar -C "$w" -xaf deb/usr/src/linux-source-6.1.tar.xz && rm -rf deb linux-source-6.1_*.deb)
  local k=$w/linux-source-6.1 opts
  opts=$(grep -v '^#' "$SRC/scripts/vm/kernel.options" | tr '\n' ' ')
  (cd "$k" && make ARCH=um defconfig >/dev/null && scripts/config $opts && make ARCH=um olddefconfig >/dev/null)
  local o
  for o in PSI MEMCG CGROUP_BPF SECCOMP_FILTER BLK_DEV_UBD EXT4_FS CFS_BANDWIDTH HOSTFS OVERLAY_FS DEBUG_INFO_NONE; do
    grep -q "^CONFIG_$o=y" "$k/.config" || die "kernel: CONFIG_$o did not stick"
  done
  ts "kernel: make ARCH=um linux (cold: several minutes)"
  (cd "$k" && make ARCH=um -j"$(($(nproc) + 1))" linux >"$w/build.log" 2>&1) || { tail -30 "$w/build.log" >&2; die "kernel build failed"; }
  install -m 0755 "$k/linux" "$out.tmp" && mv "$out.tmp" "$out"
  rm -rf "$w"
  ts "kernel: $out"
}

# build_image: Debian 12 with systemd (PID 1, pure cgroup v2), the CNI plugins
# and vm-agent; no kernel (UML boots linux-<key> from the host). The .debs are
# cached as a debootstrap tarball, the image as a sparse ext4 file.
build_image() {
  local key out w tarball pkgs
  key=$(image_key); out=$VMC/disk-$key.ext4; w=$VMC/image-build
  [ -e "$out" ] && return 0
  apt_need debootstrap e2fsprogs
  pkgs=$(tr -s ' \n' ',' <"$SRC/scripts/vm/image/packages" | sed 's/^,//; s/,$//')
  tarball=$VMC/bookworm-$(echo "$pkgs" | sha256sum | cut -c1-12).tgz
  local mirror
  mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  rm -rf "$w"; mkdir -p "$w"
  if [ ! -s "$tarball" ]; then
    ts "image: download the packages (debootstrap --make-tarball)"
    debootstrap --variant=minbase --include="$pkgs" --make-tarball="$tarball.tmp" bookworm "$w/dl" "$mirror" >"$w/dl.log" 2>&1 ||
      { tail -20 "$w/dl.log" >&2; die "debootstrap --make-tarball failed"; }
    mv "$tarball.tmp" "$tarball"; rm -rf "$w/dl"
  fi
  ts "image: debootstrap"
  local r=$w/root
  debootstrap --variant=minbase --include="$pkgs" --unpack-tarball="$tarball" bookworm "$r" "$mirror" >"$w/bs.log" 2>&1 ||
    { tail -20 "$w/bs.log" >&2; die "debootstrap failed"; }
  echo vm >"$r/etc/hostname"
  printf '127.0.0.1 localhost\n127.0.1.1 vm\n' >"$r/etc/hosts"
  echo 'LABEL=vmroot / ext4 rw,relatime 0 1' >"$r/etc/fstab"
  chroot "$r" passwd -d root >/dev/null
  rm -f "$r"/var/cache/apt/archives/*.deb
  install -m 0755 "$SRC/scripts/vm/image/vm-agent.sh" "$r/usr/local/sbin/vm-agent"
  install -m 0644 "$SRC/scripts/vm/image/vm-agent.service" "$r/etc/systemd/system/vm-agent.service"
  mkdir -p "$r/etc/systemd/system/multi-user.target.wants"
  ln -sf /etc/systemd/system/vm-agent.service "$r/etc/systemd/system/multi-user.target.wants/vm-agent.service"
  # Nothing of use without a network, or slow under UML.
  local u
  for u in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer man-db.timer \
    systemd-timesyncd.service getty@tty1.service serial-getty@ttyS0.service \
    systemd-networkd-wait-online.service; do
    ln -sf /dev/null "$r/etc/systemd/system/$u"
  done
  mkdir -p "$r/opt/cni" "$r/etc/cni/net.d" "$r/etc/containerd" "$r/etc/kubernetes/manifests" "$r/var/lib/kubelet"
  ln -sfn /usr/lib/cni "$r/opt/cni/bin"
  printf 'net.ipv4.ip_forward=1\nvm.overcommit_memory=1\nkernel.panic=10\n' >"$r/etc/sysctl.d/90-vm.conf"
  ts "image: mkfs.ext4"
  mkfs.ext4 -q -F -L vmroot -d "$r" "$out.tmp" 4G
  mv "$out.tmp" "$out"
  rm -rf "$w"
  ts "image: $out"
}

# crictl: the one scripts/rt.sh builds for the host harness (same cache, same version).
build_crictl() {
  local o=$CACHE/tools-$CRI_TOOLS/bin
  "$o/crictl" --version 2>/dev/null | grep -q "${CRI_TOOLS#v}" && return 0
  ts "crictl $CRI_TOOLS: build"
  mkdir -p "$o"
  CGO_ENABLED=0 GOBIN="$o" go install -ldflags "-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRI_TOOLS" \
    "sigs.k8s.io/cri-tools/cmd/crictl@$CRI_TOOLS"
}

# build_share: what the guest mounts, assembled from the caches and this checkout.
build_share() {
  local b=$SHARE/bin kbin
  mkdir -p "$b" "$SHARE/images" "$SHARE/deb" "$SHARE/exec"
  kbin=$("$SRC/scripts/cluster.sh" kbin)
  install -m 0755 "$CTRD_DIR"/{containerd,containerd-shim-runc-v2,ctr} "$RUNC_DIR/runc" \
    "$CACHE/tools-$CRI_TOOLS/bin/crictl" "$kbin/kubelet" "$b/"
  install -m 0644 "$CTRD_DIR/containerd.service" "$SHARE/containerd.service"
  (cd "$SRC" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$b/memhog" ./tools/memhog)
  rm -f "$SHARE"/deb/*.deb
  make -s -C "$SRC" deb DEB_DIR="$SHARE/deb" >/dev/null
  # The upgrade test installs a second package of the same tree, one version up.
  make -s -C "$SRC" deb DEB_DIR="$SHARE/deb" DEB_VERSION_SUFFIX=+upgrade >/dev/null
  # ... and upgrades from the previous release's package, built once per
  # commit from git's copy of it (no work tree of its own).
  local prev=$VMC/deb-$PREV_RELEASE
  if [ ! -f "$prev/done" ]; then
    ts "the previous release's package ($PREV_RELEASE)"
    rm -rf "$prev" && mkdir -p "$prev/src"
    git -C "$SRC" archive "$PREV_RELEASE" | tar -x -C "$prev/src"
    make -s -C "$prev/src" deb DEB_DIR="$prev" DEB_VERSION="0.1.$(git -C "$SRC" rev-list --count "$PREV_RELEASE")" >/dev/null
    rm -rf "$prev/src" && touch "$prev/done"
  fi
  rm -rf "$SHARE/deb-prev" && mkdir -p "$SHARE/deb-prev" && cp "$prev"/*.deb "$SHARE/deb-prev/"
  "$SRC/scripts/rt.sh" images "$SHARE/images"
  rm -rf "$SHARE/guest"; cp -a "$SRC/scripts/vm/guest" "$SHARE/guest"
}

# prebuild: the guest's long builds (kernel, image, containerd, runc; rt.sh up
# waits for the same containerd and runc builds under their locks rather than
# building them twice): make test runs it in the background while
# the host stages run.
prebuild() {
  mkdir -p "$VMC"
  local kp ip rc=0
  build_kernel >"$VMC/kernel.log" 2>&1 & kp=$!
  build_image >"$VMC/image.log" 2>&1 & ip=$!
  build_containerd && build_runc || rc=1
  wait $kp || { cat "$VMC/kernel.log" >&2; rc=1; }
  wait $ip || { cat "$VMC/image.log" >&2; rc=1; }
  [ $rc = 0 ] || die "prebuild failed"
  cat "$VMC/kernel.log" "$VMC/image.log" >&2
}

build() {
  mkdir -p "$VMC" "$VM"
  apt_need e2fsprogs
  # The kernel and the image take minutes, the Go builds too: side by side.
  local kp ip rc=0
  build_kernel >"$VMC/kernel.log" 2>&1 & kp=$!
  build_image >"$VMC/image.log" 2>&1 & ip=$!
  # The guest needs only the kubelet of the cluster's release.
  build_containerd && build_runc && build_crictl &&
    { [ -x "$("$SRC/scripts/cluster.sh" kbin)/kubelet" ] || "$SRC/scripts/cluster.sh" build; } || rc=1
  wait $kp || { cat "$VMC/kernel.log" >&2; rc=1; }
  wait $ip || { cat "$VMC/image.log" >&2; rc=1; }
  [ $rc = 0 ] || die "build failed"
  cat "$VMC/kernel.log" "$VMC/image.log" >&2
  build_share
  ts "build done"
}

uml_pid() { # the running guest's UML process, if it is ours
  local p
  p=$(cat "$VM/uml.pid" 2>/dev/null) || return 1
  [ -n "$p" ] && [ -r "/proc/$p/cmdline" ] || return 1
  local c
  c=$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null) || return 1
  [[ $c == *" vm.share=$SHARE "* ]] || return 1
  echo "$p"
}

# vexec TIMEOUT CMDLINE: run CMDLINE in the guest through vm-agent.
vexec() {
  local t=$1 id f rc
  shift
  id=$(date +%s%N)-$$-$RANDOM
  f=$SHARE/exec/$id
  printf '%s\n' "$*" >"$f.tmp" && mv "$f.tmp" "$f.cmd"
  local end=$((SECONDS + t)) started=
  while [ ! -e "$f.rc" ]; do
    [ -n "$started" ] || { [ -e "$f.run" ] && started=$SECONDS; }
    if [ $SECONDS -ge $end ] || ! uml_pid >/dev/null; then
      cat "$f.out" 2>/dev/null || true
      if ! uml_pid >/dev/null; then
        echo "vm.sh: the guest is not running" >&2; diagnose >&2; rc=125
      elif [ -z "$started" ]; then
        # vm-agent never took the command: the guest (or its agent) is stuck
        echo "vm.sh: exec timed out after ${t}s, never started in the guest (vm-agent not answering): $*" >&2
        diagnose >&2; rc=124
      else
        echo "vm.sh: exec timed out after ${t}s: $*" >&2; rc=124
      fi
      rm -f "$f".*
      return $rc
    fi
    sleep 0.1
  done
  cat "$f.out" 2>/dev/null || true
  rc=$(cat "$f.rc" 2>/dev/null) || rc=
  rm -f "$f".*
  [[ $rc =~ ^[0-9]+$ ]] || { echo "vm.sh: no exit code from the guest for: $*" >&2; return 126; }
  return "$rc"
}

# diagnose: what the host can see of a guest that does not answer: the UML
# processes (their states and CPU), the commands vm-agent has not taken or not
# finished, the tail of the console (kernel messages, systemd's).
diagnose() {
  local p
  echo "--- vm.sh diagnose: guest processes on the host"
  if p=$(uml_pid); then
    ps -o pid,stat,pcpu,etime,rss,wchan:20,comm -g "$p" 2>/dev/null | head -20
    # where the UML kernel's own threads wait on the host (a hung guest
    # shows here, not on its silent console)
    local task
    for task in /proc/"$p"/task/*; do
      echo "  task ${task##*/}: $(cat "$task/stat" 2>/dev/null | cut -d' ' -f3) $(cat "$task/wchan" 2>/dev/null)"
      head -8 "$task/stack" 2>/dev/null | sed 's/^/    /'
    done | head -60
  else echo "(no UML process)"; fi
  echo "--- vm.sh diagnose: exec queue"
  ls -la "$SHARE/exec" 2>/dev/null | tail -n +4 | head -20
  echo "--- vm.sh diagnose: console (last 30 lines)"
  tail -30 "$VM/console.log" 2>/dev/null | sed 's/\x1b\[[0-9;]*m//g; s/^/  /'
  echo "--- vm.sh diagnose: host"
  uptime; free -m | head -2
}

up() {
  if uml_pid >/dev/null && [ -e "$MARK" ]; then ts "guest already up"; return 0; fi
  build
  local kernel disk
  kernel=$VMC/linux-$(kernel_key); disk=$VMC/disk-$(image_key).ext4
  rm -f "$VM/run.cow" "$VM/console.log" "$SHARE/ready" "$SHARE"/exec/*
  ts "boot: UML, $VM_MEM, pure cgroup v2"
  # The guest's RAM is a file in TMPDIR that UML unlinks at once: tmpfs keeps it off the disk.
  TMPDIR=/dev/shm setsid "$kernel" ubd0="$VM/run.cow,$disk" root=/dev/ubda rw mem="$VM_MEM" \
    con=null con0=null,fd:1 console=tty0 systemd.unified_cgroup_hierarchy=1 \
    vm.share="$SHARE" </dev/null >"$VM/console.log" 2>&1 &
  echo $! >"$VM/uml.pid"
  touch "$MARK"
  local i
  for i in $(seq 1 600); do
    [ -e "$SHARE/ready" ] && break
    uml_pid >/dev/null || { tail -40 "$VM/console.log" >&2; die "the guest died while booting"; }
    sleep 0.5
  done
  [ -e "$SHARE/ready" ] || { tail -40 "$VM/console.log" >&2; die "vm-agent not ready after 300s"; }
  ts "vm-agent ready (guest uptime $(cat "$SHARE/ready")s); waiting for systemd"
  vexec 600 'systemctl is-system-running --wait >/dev/null; systemctl is-system-running; systemctl --failed --no-legend' >&2 || true
  ts "provision: containerd $CTRD, runc $RUNC, the kubelet, cri-guard from its .deb"
  vexec 900 'bash /vm/guest/provision.sh' >"$VM/provision.log" 2>&1 || { cat "$VM/provision.log" >&2; die "provisioning failed"; }
  ts "guest up"
}

down() {
  local p i
  if p=$(uml_pid); then
    ts "power off"
    printf 'systemctl poweroff --force\n' >"$SHARE/exec/poweroff.tmp" && mv "$SHARE/exec/poweroff.tmp" "$SHARE/exec/poweroff.cmd"
    for i in $(seq 1 120); do kill -0 "$p" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$p" 2>/dev/null; then
      ts "no power-off after 60s: SIGTERM, then SIGKILL, to the guest's process group"
      kill -TERM -- -"$p" 2>/dev/null || true; sleep 2; kill -KILL -- -"$p" 2>/dev/null || true
    fi
  fi
  # UML's host processes share the process group of the kernel we started
  # (a forced power-off: the guest's disk is a throw-away layer).
  if [ -n "${p:-}" ]; then
    for i in $(seq 1 20); do pgrep -g "$p" >/dev/null || break; sleep 0.25; done
    pgrep -g "$p" >/dev/null && kill -KILL -- -"$p" 2>/dev/null || true
  fi
  rm -rf "$VM"
}

status() {
  uml_pid >/dev/null || { echo "guest: down"; return 1; }
  vexec 30 'echo "guest: up, $(systemctl is-system-running), uptime $(cut -d" " -f1 /proc/uptime)s"'
}

cmd=${1:-}
shift || true
case "$cmd" in
build) build ;;
prebuild) prebuild ;;
build-kernel | build-image | build-containerd | build-runc | build-crictl) mkdir -p "$VMC"; "${cmd/-/_}" ;;
up) up ;;
down) down ;;
status) status ;;
exec)
  t=600
  while [ $# -gt 0 ]; do
    case "$1" in
    -t) t=$2; shift 2 ;;
    --) shift; break ;;
    *) break ;;
    esac
  done
  [ $# -gt 0 ] || die "usage: $0 exec [-t SECS] -- CMD"
  uml_pid >/dev/null || die "the guest is not up (scripts/vm.sh up)"
  vexec "$t" "$*"
  ;;
cp)
  [ -f "${1:-}" ] || die "usage: $0 cp FILE"
  mkdir -p "$SHARE/files"; n=$(basename "$1"); cp "$1" "$SHARE/files/$n"; echo "/vm/files/$n"
  ;;
*) die "usage: $0 build|up|exec [-t SECS] -- CMD|cp FILE|down|status" ;;
esac
