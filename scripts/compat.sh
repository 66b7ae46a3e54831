#!/usr/bin/env bash
# compat.sh: the compatibility matrix, kubelet releases x containerd releases,
# cri-guard in front of each pair (make compat; not part of make test).
#
#   scripts/compat.sh build          build (or keep) every cell's binaries
#   scripts/compat.sh run [CELL...]  run the cells (default: all), then write
#                                    docs/compatibility.md from every cell's result
#   scripts/compat.sh cells          list the cells (k<kubelet>-c<containerd>)
#   scripts/compat.sh report         write docs/compatibility.md from the results kept
#
# Each cell, one at a time:
#   1. containerd of the cell's release (built from its Go module by
#      scripts/build-runtime.sh, cached in $CACHE/vm/containerd-<version> like
#      the harness's own) with the harness's runc, in a directory of its own
#      ($W/<cell>) and the v1 cgroups /cri-guard-compat/<cell>;
#   2. cri-guard from this checkout in front of it (CRI only, its stats from a
#      fake tree under $W/<cell>/stats, as the cluster's);
#   3. critest through cri-guard, with the host stage's skips and flags
#      (integration/host/critest_test.go);
#   4. a standalone kubelet of the cell's release (no API server: static pods
#      only) on cri-guard's socket: a BestEffort static pod is admitted and
#      runs; the fake meminfo drops under evictionHard, cri-guard evicts it
#      (its sandbox stops); a second BestEffort static pod added under that
#      pressure is refused (no sandbox in containerd).
# Results: $RES/<cell>.env (kept across runs: the report lists what ran and
# when; a cell never run is listed as not run).
#
# What the cells share, up for the whole run: a registry on $REG with the
# test images (critest pulls), the CNI bridge $BRIDGE. The kubelet uses two
# fixed host paths (/var/lib/kubelet/device-plugins, /var/log/containers),
# as the cluster's does: each cell takes /tmp/cri-guard-harness.lock (one
# cell at a time, the lock released between cells).
#
# Versions: COMPAT_KUBELETS, COMPAT_CONTAINERDS (the Makefile's defaults are
# the newest patch on the module proxy of each minor release).
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${CRI_GUARD_CACHE:-${HOME:-/root}/.cache/cri-guard}
W=${CRI_GUARD_COMPAT:-/tmp/cri-guard-compat}
RES=${CRI_GUARD_COMPAT_RESULTS:-$CACHE/compat-results}
KUBELETS=${COMPAT_KUBELETS:-v1.35.4 v1.36.3 v1.37.2}
CONTAINERDS=${COMPAT_CONTAINERDS:-v2.2.9 v2.3.7 v2.4.2}
LOCK=/tmp/cri-guard-harness.lock
CG=cri-guard-compat
BRIDGE=criguardc0
SUBNET=10.244.89.0/24
NET=cri-guard-compat
REG=127.0.0.1:5089
KUBELET_PORT=10370
KUBELET_HEALTHZ=10368
NODE=compat
CRI_TOOLS=v1.37.0 # scripts/rt.sh's: the same critest and crictl
GINKGO=v2.32.1
TOOLS=$CACHE/tools-$CRI_TOOLS/bin
DOC=$SRC/docs/compatibility.md
export CGO_ENABLED=0 CONTAINERD_SUPPRESS_DEPRECATION_WARNINGS=1

LOG_PREFIX=compat LOG_WIDTH=7
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SRC/scripts/lib.sh" # ts, die, apt_need (its defaults), alive, stop_pid, launch, wait_for, ...
need_root

# shellcheck source-path=SCRIPTDIR source=build-runtime.sh
. "$SRC/scripts/build-runtime.sh" # RUNTIME_CACHE, RUNC_DIR, build_containerd, build_runc

ctrd_dir() { echo "$RUNTIME_CACHE/containerd-$1"; }
kubelet_bin() { echo "$CACHE/kubernetes-$1/bin/kubelet"; }
cell_name() { echo "k${1#v}-c${2#v}"; }

cells() {
  local k c
  for k in $KUBELETS; do for c in $CONTAINERDS; do cell_name "$k" "$c"; done; done
}

# build: every containerd and kubelet of the matrix, runc, the tools, cri-guard.
# A build that compiled (not one found in the cache) is timed in $RES/builds.tsv.
build() {
  local c k t
  mkdir -p "$RES"
  for c in $CONTAINERDS; do
    [ -x "$(ctrd_dir "$c")/containerd" ] && continue
    t=$EPOCHREALTIME
    CTRD=$c CTRD_DIR=$(ctrd_dir "$c") build_containerd
    built "containerd $c" "$t"
  done
  build_runc
  for k in $KUBELETS; do
    [ -x "$(kubelet_bin "$k")" ] && continue
    t=$EPOCHREALTIME
    "$SRC/scripts/cluster.sh" build-kubelet "$k" >/dev/null
    built "kubelet $k" "$t"
  done
  cri_tools # as scripts/rt.sh builds them (the same cache)
  mkdir -p "$W/bin"
  (cd "$SRC" && go build -tags grpcnotrace -trimpath -ldflags '-s -w' -o "$W/bin/cri-guard" ./cmd/cri-guard)
}

# built WHAT START: a line of $RES/builds.tsv (what, seconds, date, the load average then).
built() {
  printf '%s\t%s\t%s\t%s\n' "$1" "$(awk -v a="$EPOCHREALTIME" -v b="$2" 'BEGIN { printf "%d", a - b }')" \
    "$(date -u +%Y-%m-%d)" "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RES/builds.tsv"
}

# shared_up: the registry with the test images and the CNI configuration's bridge.
shared_up() {
  apt_need containernetworking-plugins docker-registry curl
  mkdir -p "$W"/{bin,images,registry-data,logs}
  if ! curl -sf "http://$REG/v2/" >/dev/null 2>&1; then
    cat >"$W/registry.yml" <<YML
version: 0.1
log: {level: warn, accesslog: {disabled: true}}
storage: {filesystem: {rootdirectory: $W/registry-data}, delete: {enabled: true}}
http: {addr: $REG}
YML
    setsid docker-registry serve "$W/registry.yml" >"$W/logs/registry.log" 2>&1 </dev/null &
    echo $! >"$W/registry.pid"
    wait_for 20 curl -sf "http://$REG/v2/" || die "registry did not start (log: $W/logs/registry.log)"
  fi
  # the images, unless an earlier run built them (a run that failed after
  # starting the registry left it up without them)
  if [ ! -s "$W/images/pause.tar" ] || [ ! -s "$W/images/busybox.tar" ]; then
    ts "images (build + push to $REG)"
    # the harness's images, built offline (scripts/rt.sh images builds the same)
    (cd "$SRC" && for p in pause nnp fakenginx; do
      go build -trimpath -ldflags='-s -w' -o "$W/bin/$p" "./tools/images/$p"
    done && go build -C tools/mkimages -o "$W/bin/mkimages" .)
    [ -x "$CACHE/dl/bin/busybox" ] || "$SRC/scripts/rt.sh" images "$W/images.tmp" >/dev/null # fetches busybox into the cache
    rm -rf "$W/images.tmp"
    "$W/bin/mkimages" -out "$W/images" -pause "$W/bin/pause" -busybox "$CACHE/dl/bin/busybox" \
      -nnp "$W/bin/nnp" -fakenginx "$W/bin/fakenginx" -push "$REG" >"$W/logs/mkimages.log"
  fi
}

# shared_down: the registry, the bridge, the cgroups' parent and $W (the cells' are gone by then).
shared_down() {
  stop_pid "$W/registry.pid" docker-registry TERM
  ip link del "$BRIDGE" 2>/dev/null || true
  rm -rf /var/lib/cni/networks/"$NET" 2>/dev/null || true
  local c
  for c in /sys/fs/cgroup/*/"$CG"; do if [ -d "$c" ]; then rmdir "$c" 2>/dev/null || true; fi; done
  if [ -d "$W" ] && [ -z "$(find "$W" -maxdepth 2 -name .cri-guard-compat)" ]; then rm -rf "$W"; fi
}

# containerd_toml D CTRD: scripts/rt.sh's configuration (version 3) under D.
containerd_toml() {
  local d=$1 cd
  cd=$(ctrd_dir "$2")
  cat >"$d/containerd.toml" <<TOML
version = 3
root = "$d/root"
state = "$d/state"
[grpc]
  address = "$d/containerd.sock"
[ttrpc]
  address = "$d/containerd.sock.ttrpc"
[cgroup]
  path = "/$CG/$(basename "$d")/containerd"
[plugins.'io.containerd.internal.v1.opt']
  path = "$d/opt"
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
    config_path = "$d/certs.d"
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      runtime_path = "$cd/containerd-shim-runc-v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$RUNC_DIR/runc"
        Root = "$d/state/runc"
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$d/cni/net.d"
TOML
  cni_conflist "$d" "$NET" "$BRIDGE" "$SUBNET"
  registry_mirrors "$d" "$REG"
}

# guard_yaml D KUBELET: cri-guard CRI-only in front of D's containerd, fake stats
# (16 GiB, 12 GiB available), housekeeping every second, memory.available
# computed as the cell's kubelet computes it. Seed critical rules:
# a standalone kubelet runs only static pods, which the modern rules make
# critical; under seed rules a static pod is evictable unless it is in
# kube-system with the critical-pod annotation (as in the guest).
guard_yaml() {
  local d=$1 kc=${2#v}
  kc=${kc%.*}
  mkdir -p "$d"/{guard/state,stats/proc/pressure,stats/cgroup}
  fake_stats "$d/stats"
  cat >"$d/guard/config.yaml" <<YAML
listen: $d/guard/cri-guard.sock
runtimeEndpoint: $d/containerd.sock
stateDir: $d/guard/state
cgroupRoot: $d/stats/cgroup
procRoot: $d/stats/proc
housekeepingInterval: 1s
evictionHard: {memory.available: 1Gi}
evictionPressureTransitionPeriod: 60s
evictionMaxPodGracePeriod: 5s
psiTrigger: ""
critical: {rules: seed}
kubeletCompatibility: "$kc"
metricsAddress: ""
adminSocket: $d/guard/admin.sock
log: {level: debug, format: text}
YAML
}

# set_available D BYTES: the fake meminfo's MemAvailable (written whole, then renamed).
set_available() {
  local k=$(($2 >> 10))
  printf 'MemTotal:       16777216 kB\nMemFree:        %d kB\nMemAvailable:   %d kB\nBuffers:        0 kB\nCached:         0 kB\n' \
    "$k" "$k" >"$1/stats/proc/meminfo.tmp"
  mv "$1/stats/proc/meminfo.tmp" "$1/stats/proc/meminfo"
}

# kubelet_yaml D: the standalone kubelet's configuration (the cluster's, less the
# API server's parts). Its housekeeping period is no configuration field
# (cadvisor's flag, --housekeeping-interval, the one such flag 1.37 keeps).
kubelet_yaml() {
  local d=$1
  cat >"$d/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://$d/guard/cri-guard.sock
imageServiceEndpoint: unix://$d/guard/cri-guard.sock
cgroupDriver: cgroupfs
cgroupRoot: /$CG/$(basename "$d")/pods
cgroupsPerQOS: true
enforceNodeAllocatable: [pods]
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
staticPodPath: $d/manifests
fileCheckFrequency: 2s
podLogsDir: $d/pod-logs
evictionHard: {memory.available: 1Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%, imagefs.inodesFree: 1%}
evictionPressureTransitionPeriod: 10s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
makeIPTablesUtilChains: false
serializeImagePulls: false
YAML
}

# static_pod D NAME: a BestEffort static pod in default that sleeps.
static_pod() {
  cat >"$1/manifests/$2.yaml.tmp" <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $2, namespace: default}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 5
  containers:
  - name: main
    image: registry.k8s.io/e2e-test-images/busybox:1.29-2
    imagePullPolicy: IfNotPresent
    command: [sleep, "3600"]
YAML
  mv "$1/manifests/$2.yaml.tmp" "$1/manifests/$2.yaml"
}

# sandboxes D NAME STATE: the ids of the pod NAME's sandboxes in STATE, in containerd directly.
sandboxes() {
  CRI_CONFIG_FILE=/dev/null timeout 30 "$TOOLS/crictl" --runtime-endpoint "unix://$1/containerd.sock" \
    pods -q --name "^$2-$NODE\$" --state "$3" 2>/dev/null || true
}
running() { [ -n "$(CRI_CONFIG_FILE=/dev/null timeout 30 "$TOOLS/crictl" --runtime-endpoint "unix://$1/containerd.sock" \
  ps -q --pod "$(sandboxes "$1" "$2" ready | head -1)" --state running 2>/dev/null)" ]; }
guard_logged() { grep "msg=\"$2\"" "$1/logs/cri-guard.log" | grep -q " pod=$3-$NODE "; }

# cell_down D: everything the cell started, by PID, and its directory.
cell_down() {
  local d=$1
  [ -e "$d" ] || return 0
  [ -f "$d/.cri-guard-compat" ] || die "$d exists but was not made by compat.sh: not touching it"
  stop_pid "$d/kubelet.pid" kubelet TERM
  if alive "$d/containerd.pid" containerd; then
    CRI_CONFIG_FILE=/dev/null timeout 60 "$TOOLS/crictl" --runtime-endpoint "unix://$d/containerd.sock" rmp -af >/dev/null 2>&1 || true
  fi
  stop_pid "$d/cri-guard.pid" cri-guard TERM
  stop_pid "$d/containerd.pid" containerd TERM
  kill_shims "$d/containerd.sock"
  cg_kill "$CG/$(basename "$d")" # what is left in the cell's cgroups, by PID; then they go
  cg_rmdir "$CG/$(basename "$d")"
  umount_under "$d"
  kubelet_dirs_clean "$d"
  rm_unmounted "$d"
}

# run_cell KUBELET CONTAINERD: one cell, its result in $RES/<cell>.env.
run_cell() {
  local k=$1 c=$2 cell d t0 out
  cell=$(cell_name "$k" "$c"); d=$W/$cell; t0=$EPOCHREALTIME
  local critest="not run" passed failed admission=no eviction=no what=""
  cell_down "$d"
  mkdir -p "$d"/{root,state,opt,cni/net.d,logs,manifests,pod-logs,kubelet} && touch "$d/.cri-guard-compat"
  kubelet_dirs_note "$d"
  ts "$cell: containerd $c"
  containerd_toml "$d" "$c"
  launch "$d/containerd.pid" "$d/logs/containerd.log" "$CG/$cell/containerd" "$(ctrd_dir "$c")/containerd" --config "$d/containerd.toml"
  if ! wait_for 60 "$(ctrd_dir "$c")/ctr" -a "$d/containerd.sock" version; then
    what="containerd did not start"
  else
    local i
    for i in pause busybox; do "$(ctrd_dir "$c")/ctr" -a "$d/containerd.sock" -n k8s.io images import "$W/images/$i.tar" >/dev/null; done
    ts "$cell: cri-guard"
    guard_yaml "$d" "$k"
    launch "$d/cri-guard.pid" "$d/logs/cri-guard.log" "$CG/$cell/cri-guard" "$W/bin/cri-guard" --config "$d/guard/config.yaml"
    if ! wait_for 60 env CRI_CONFIG_FILE=/dev/null "$TOOLS/crictl" --runtime-endpoint "unix://$d/guard/cri-guard.sock" --timeout 5s version; then
      what="cri-guard did not start"
    fi
  fi
  if [ -z "$what" ]; then
    ts "$cell: critest through cri-guard"
    printf 'defaultTestContainerImage: registry.k8s.io/e2e-test-images/busybox:1.29-2\nwebServerTestImage: registry.k8s.io/e2e-test-images/nginx:1.14-2\n' \
      >"$d/test-images.yaml"
    # integration/host/critest_test.go's skips (and why), the same flags
    (cd "$d" && PATH=$TOOLS:$PATH timeout 20m "$TOOLS/critest" \
      --runtime-endpoint "unix://$d/guard/cri-guard.sock" --image-endpoint "unix://$d/guard/cri-guard.sock" \
      --test-images-file "$d/test-images.yaml" --ginkgo.no-color --parallel=2 \
      --ginkgo.skip "execSync with timeout" --ginkgo.skip "public image with digest" \
      --ginkgo.skip "runtime should support listing pod sandbox metrics" >"$d/logs/critest.log" 2>&1) || true
    out=$(grep -oE '[0-9]+ Passed \| [0-9]+ Failed \| [0-9]+ Pending \| [0-9]+ Skipped' "$d/logs/critest.log" | tail -1 || true)
    if [ -n "$out" ]; then
      passed=$(awk '{print $1}' <<<"$out"); failed=$(awk '{print $4}' <<<"$out"); critest="$passed passed, $failed failed"
      if [ "$failed" != 0 ]; then
        what="critest: $(grep -E '^\s*\[FAIL\]' "$d/logs/critest.log" | sed 's/^\s*\[FAIL\] //; s/ \[It\]/:/' | sort -u | head -5 | paste -sd ';' -)"
      fi
    else
      critest="no summary"; what="critest gave no summary"
    fi
    cp "$d/logs/critest.log" "$RES/$cell.critest.log"

    ts "$cell: kubelet $k (standalone), admission and eviction"
    kubelet_yaml "$d"
    cg_make "$CG/$cell/pods"
    launch "$d/kubelet.pid" "$d/logs/kubelet.log" "$CG/$cell/kubelet" "$(kubelet_bin "$k")" --config "$d/kubelet.yaml" \
      --hostname-override "$NODE" --root-dir "$d/kubelet" --cert-dir "$d/kubelet/pki" --housekeeping-interval 2s
    if ! wait_for 120 curl -sf "http://127.0.0.1:$KUBELET_HEALTHZ/healthz"; then
      what="${what:+$what; }kubelet not healthy: $(grep -E '^E|[Ee]rror' "$d/logs/kubelet.log" | tail -1 | cut -c1-200)"
    else
      static_pod "$d" victim
      if ! wait_for 180 running "$d" victim; then
        what="${what:+$what; }victim not running under no pressure"
      else
        # Pressure: memory.available 500Mi < cri-guard's evictionHard 1Gi.
        set_available "$d" $((500 << 20))
        if wait_for 120 guard_logged "$d" "pod evicted" victim && [ -z "$(sandboxes "$d" victim ready)" ]; then
          eviction=ok
        else
          eviction=no; what="${what:+$what; }victim not evicted"
        fi
        static_pod "$d" late
        if wait_for 120 guard_logged "$d" "pod sandbox refused" late &&
          [ -z "$(sandboxes "$d" late ready)$(sandboxes "$d" late notready)" ]; then
          admission=ok
        else
          what="${what:+$what; }late pod not refused under pressure"
        fi
      fi
    fi
    # A field this release does not know is ignored (lenient decoding) with this line:
    local unknown
    unknown=$(grep -o 'strict decoding error: [^"]*' "$d/logs/kubelet.log" 2>/dev/null | head -1 || true)
    [ -z "$unknown" ] || what="${what:+$what; }kubelet config: $unknown"
    cp "$d/logs/kubelet.log" "$RES/$cell.kubelet.log" 2>/dev/null || true
    cp "$d/logs/cri-guard.log" "$RES/$cell.cri-guard.log" 2>/dev/null || true
  fi
  cell_down "$d"
  result "$k" "$c" "$t0" "$critest" "$admission" "$eviction" "$what"
}

# result KUBELET CONTAINERD START CRITEST ADMISSION EVICTION WHAT: the cell's $RES/<cell>.env.
result() {
  local cell secs
  cell=$(cell_name "$1" "$2")
  secs=$(awk -v a="$EPOCHREALTIME" -v b="$3" 'BEGIN { printf "%d", a - b }')
  {
    printf 'cell=%q\nkubelet=%q\ncontainerd=%q\ndate=%q\n' "$cell" "$1" "$2" "$(date -u +%Y-%m-%d)"
    printf 'critest=%q\nadmission=%q\neviction=%q\nwhat=%q\nseconds=%q\n' "$4" "$5" "$6" "$7" "$secs"
  } >"$RES/$cell.env"
  ts "$cell: critest $4, admission $5, eviction $6${7:+ ($7)} in ${secs}s"
}

report() {
  local k c cell
  mkdir -p "$(dirname "$DOC")"
  {
    cat <<'MD'
# Compatibility matrix

`make compat` (scripts/compat.sh; not part of `make test`) runs cri-guard from
this checkout in front of each containerd release, with each kubelet release
on top, on this repository's test machine kind (cgroup v1, cgroupfs driver).
Each cell, on its own containerd (its own directory and cgroups):

- **critest**: the CRI validation suite (cri-tools v1.37.0) through
  cri-guard, with the host stage's skips (integration/host/critest_test.go);
  passed and failed specs.
- **admission**: a standalone kubelet of that release (no API server, static
  pods) on cri-guard's socket; under memory pressure (a fake meminfo under
  cri-guard's `evictionHard: {memory.available: 1Gi}`) a new BestEffort
  static pod is refused and has no sandbox in containerd.
- **eviction**: a BestEffort static pod admitted and running before the
  pressure is evicted by cri-guard when it starts (its sandbox stops).

A cell reads "not run" when it was not run; nothing here is inferred.
`scripts/compat.sh run k1.37.2-c2.4.2` reruns one cell; each cell's logs are
kept under ~/.cache/cri-guard/compat-results.

| cell (kubelet × containerd) | date | critest through cri-guard | admission | eviction | what failed |
|---|---|---|---|---|---|
MD
    for k in $KUBELETS; do
      for c in $CONTAINERDS; do
        cell=$(cell_name "$k" "$c")
        if [ -f "$RES/$cell.env" ]; then
          (
            # shellcheck disable=SC1090 # a cell's result
            . "$RES/$cell.env"
            # shellcheck disable=SC2154 # from the result
            printf '| %s × %s | %s | %s | %s | %s | %s |\n' "$kubelet" "$containerd" "$date" "$critest" "$admission" "$eviction" "${what:--}"
          )
        else
          printf '| %s × %s | - | not run | not run | not run | - |\n' "$k" "$c"
        fi
      done
    done
    # shellcheck disable=SC2016 # Markdown backquotes
    if [ -f "$RES/builds.tsv" ]; then
      printf '\nCold builds measured here (from the Go module cache and Go build cache of this\nmachine; 2 cores shared with other work, `nice`d, so the load average is given):\n\n'
      printf '| build | seconds | date | load average (1, 5, 15 min) |\n|---|---|---|---|\n'
      awk -F'\t' '{ printf "| %s | %s | %s | %s |\n", $1, $2, $3, $4 }' "$RES/builds.tsv"
    fi
    # shellcheck disable=SC2016 # Markdown backquotes
    if [ -f "$RES/timing.md" ]; then
      printf '\nWall time of `make compat` runs on this machine (build: every cell'"'"'s binaries; a\ncold build compiles them, a warm one finds them in ~/.cache/cri-guard):\n\n'
      cat "$RES/timing.md"
    fi
  } >"$DOC"
  ts "wrote $DOC"
}

run() {
  local want=("$@") k c cell n=0 t
  mkdir -p "$RES"
  local tb=$EPOCHREALTIME
  ts "build (kubelets: $KUBELETS; containerds: $CONTAINERDS)"
  build
  local bsecs
  bsecs=$(awk -v a="$EPOCHREALTIME" -v b="$tb" 'BEGIN { printf "%d", a - b }')
  shared_up
  trap 'shared_down' EXIT
  for k in $KUBELETS; do
    for c in $CONTAINERDS; do
      cell=$(cell_name "$k" "$c")
      if [ ${#want[@]} -gt 0 ] && ! printf '%s\n' "${want[@]}" | grep -qx "$cell"; then continue; fi
      # One cell at a time under the harness lock; released between cells.
      t=$EPOCHREALTIME
      (flock -x 9
        trap 'cell_down "$W/$cell"' EXIT
        run_cell "$k" "$c") 9>"$LOCK" ||
        result "$k" "$c" "$t" "aborted" "-" "-" "the cell's script stopped on an error (see make compat's output)"
      n=$((n + 1))
    done
  done
  shared_down
  trap - EXIT
  local secs
  secs=$(awk -v a="$EPOCHREALTIME" -v b="$tb" 'BEGIN { printf "%d", a - b }')
  ts "matrix done: $n cells in ${secs}s (build ${bsecs}s)"
  [ -f "$RES/timing.md" ] || printf '| run | cells | build (s) | wall (s) |\n|---|---|---|---|\n' >"$RES/timing.md"
  printf '| %s | %d | %d | %d |\n' "$(date -u +%Y-%m-%dT%H:%MZ)" "$n" "$bsecs" "$secs" >>"$RES/timing.md"
  report
}

case "${1:-}" in
build) build ;;
run) shift; run "$@" ;;
cells) cells ;;
report) report ;;
*) die "usage: $0 build|run [CELL...]|cells|report" ;;
esac
