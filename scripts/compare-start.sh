#!/usr/bin/env bash
# compare-start.sh OLD NEW: what two cri-guard binaries do, side by side, with
# each start-up or reload mistake an operator, a local user or a package
# upgrade can make: does the CRI socket serve (a Version answered), how long
# from start to that answer, and what the log says. A private containerd
# (the harness's build, cached by scripts/rt.sh or scripts/vm.sh) answers
# behind them; nothing else of the machine is touched.
#
#   scripts/compare-start.sh /tmp/cri-guard-old bin/cri-guard
set -euo pipefail
LOG_PREFIX=compare-start
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib.sh" # die
old=$1 new=$2
CACHE=${CRI_GUARD_CACHE:-${HOME:-/root}/.cache/cri-guard}
ctrd=$( (ls "$CACHE"/vm/containerd-v2.*/containerd "$CACHE"/containerd-v2.*/bin/containerd 2>/dev/null || true) | head -1)
crictl=$(ls "$CACHE"/tools-*/bin/crictl | head -1)
[ -x "$ctrd" ] && [ -x "$crictl" ] || die "no cached containerd 2.x or crictl: run scripts/rt.sh up once"
w=$(mktemp -d /tmp/cri-guard-cmp.XXXXXX)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  umount "$w"/ro 2>/dev/null || true
  rm -rf "$w"
}
trap cleanup EXIT
mkdir -p "$w/ctrd"
cat >"$w/ctrd/config.toml" <<TOML
version = 3
root = "$w/ctrd/root"
state = "$w/ctrd/state"
[grpc]
  address = "$w/ctrd/c.sock"
[ttrpc]
  address = "$w/ctrd/c.sock.ttrpc"
TOML
"$ctrd" --config "$w/ctrd/config.toml" >"$w/ctrd/log" 2>&1 &
pids+=($!)
for _ in $(seq 300); do "$crictl" --runtime-endpoint "unix://$w/ctrd/c.sock" version >/dev/null 2>&1 && break; sleep 0.1; done

# run NAME BINARY SETUP: start BINARY with the case's config; print whether
# it served within 10 s, the time to the first Version, its exit if it
# ended, and the first warning or error it logged.
run() {
  local name=$1 bin=$2 setup=$3 d p t0 served=no ms=- exit=running line
  d=$w/$name-$(basename "$bin"); mkdir -p "$d"
  cat >"$d/config.yaml" <<YAML
listen: $d/run/cri-guard.sock
runtimeEndpoint: $w/ctrd/c.sock
stateDir: $d/state
adminSocket: $d/run/admin.sock
metricsAddress: 127.0.0.1:0
psiTrigger: ""
YAML
  $setup "$d"
  t0=$EPOCHREALTIME
  "$bin" --config "$d/config.yaml" >"$d/log" 2>&1 &
  p=$!; pids+=("$p")
  for _ in $(seq 500); do
    if "$crictl" --timeout 1s --runtime-endpoint "unix://$d/run/cri-guard.sock" version >/dev/null 2>&1; then
      served=yes; ms=$(awk -v a="$EPOCHREALTIME" -v b="$t0" 'BEGIN { printf "%d", (a - b) * 1000 }'); break
    fi
    [ -d /proc/"$p" ] || break
    sleep 0.01
  done
  [ -n "${AFTER:-}" ] && [ "$served" = yes ] && $AFTER "$d" "$p"
  if ! [ -d /proc/"$p" ]; then wait "$p" 2>/dev/null && exit=0 || exit=$?; fi
  line=$(grep -m1 -E 'level=(warning|error|fatal)|^cri-guard:' "$d/log" | sed -E 's/^time="[^"]*" //' | cut -c1-150 || true)
  printf '%-22s %-16s served=%-3s ms=%-5s exit=%-7s %s\n' "$name" "$(basename "$bin")" "$served" "$ms" "$exit" "$line"
  kill "$p" 2>/dev/null || true
}

unknown_key() { echo "newerReleaseSetting: true" >>"$1/config.yaml"; }
missing_kubeconfig() { printf 'kubernetes: {kubeconfig: %s/kubelet.conf, nodeName: node-a}\n' "$1" >>"$1/config.yaml"; }
readonly_state() { mkdir -p "$w/ro"; mountpoint -q "$w/ro" || mount -t tmpfs -o ro,size=1m tmpfs "$w/ro"; sed -i "s|^stateDir: .*|stateDir: $w/ro|" "$1/config.yaml"; }
lock_dir() { mkdir -p "$1/state/.lock"; }
metrics_held() {
  local port=$((20000 + RANDOM % 20000))
  setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 -c "import socket,time; s=socket.socket(); s.bind(('127.0.0.1', $port)); s.listen(); time.sleep(60)" &
  pids+=($!); sleep 0.5
  sed -i "s|^metricsAddress: .*|metricsAddress: 127.0.0.1:$port|" "$1/config.yaml"
}
fires_now() { echo "evictionHard: {memory.available: 100Ti}" >>"$1/config.yaml"; }
world_writable_dir() { mkdir -p "$1/run"; chmod 0777 "$1/run"; }
nothing() { :; }
reload_fires() {
  echo "evictionHard: {memory.available: 100Ti}" >>"$1/config.yaml"; kill -HUP "$2"; sleep 1
  grep -m1 "component=reload" "$1/log" | sed -E 's/^time="[^"]*" /  reload: /' | cut -c1-150 || true
}
dir_mode() { printf '  socket dir mode after start: %s\n' "$(stat -c %a "$1/run")"; }

# (A file that does not load, or an empty one, means the default paths,
# /run/cri-guard among them: those cases are left to the unit tests, so as
# not to touch a cri-guard this machine runs.)
for c in nothing unknown_key missing_kubeconfig readonly_state lock_dir metrics_held fires_now world_writable_dir; do
  for b in "$old" "$new"; do
    AFTER=
    [ $c = world_writable_dir ] && AFTER=dir_mode
    run "$c" "$b" "$c"
  done
done
for b in "$old" "$new"; do AFTER=reload_fires run reload_fires_now "$b" nothing; done
