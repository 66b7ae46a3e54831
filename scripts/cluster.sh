#!/usr/bin/env bash
# cluster.sh: a real one-node Kubernetes in front of the harness containerd,
# with cri-guard between the kubelet and containerd (or several nodes:
# CRI_GUARD_CLUSTER_NODES, below).
#
#   scripts/cluster.sh build            build (or keep) etcd and Kubernetes $K8S
#   scripts/cluster.sh build-kubelet V  build (or keep) the kubelet of Kubernetes V alone; print its path
#   scripts/cluster.sh kbin             print the directory of those binaries
#   scripts/cluster.sh up               start (or keep) the cluster; idempotent
#   scripts/cluster.sh down             undo everything `up` did
#   scripts/cluster.sh status           exit 0 when every component runs and the node is Ready
#   scripts/cluster.sh kill-cri-guard   SIGKILL cri-guard (the kubelet keeps running)
#   scripts/cluster.sh start-cri-guard [api]  start cri-guard again on the same state (api: connected to the API server;
#                                   CRI_GUARD_CLUSTER_BIN: another cri-guard binary than the one `up` built)
#   scripts/cluster.sh stop-apiserver / start-apiserver  an API server outage
#   scripts/cluster.sh restart-kubelet  stop the kubelet and start it again (cri-guard keeps running)
#   scripts/cluster.sh node K VERB      VERB (kill-cri-guard, start-cri-guard [api], restart-kubelet) on node K
#                                   of a cluster of several nodes (node 1 is the one above)
#   scripts/cluster.sh node K exec CMD...  run CMD in node K's network and mount namespaces
#
# The cluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
# a kubelet of one Kubernetes release, built from their Go modules and cached in
# $KBIN; a PKI made by tools/mkcerts (Node,RBAC authorization, NodeRestriction,
# the kubelet with a system:node:$NODE client certificate); cri-guard built from
# this checkout. The kubelet's runtime endpoint is cri-guard's socket; cri-guard
# forwards to the harness containerd of scripts/rt.sh (`up` starts the harness
# when it is not up; `down` leaves it up), whose CNI bridge gives pods their IPs.
# cri-guard reads its stats from a fake tree under $C/stats that tests write to
# (pressure at will, as in the other integration tests).
#
# While the cluster is up the kubelet owns the harness containerd: it kills
# running sandboxes it does not know and removes dead ones, so nothing else may
# use that containerd meanwhile (take /tmp/cri-guard-harness.lock around both).
#
# Everything listens on 127.0.0.1 only. Everything lives under $C
# (CRI_GUARD_CLUSTER, default /tmp/cri-guard-cluster); each process runs in v1
# cgroups of its own, /$CGC/<name>; the kubelet's pods under /$CGC-pods. `up`
# writes $C/env (source it: KUBECONFIG, PATH with kubectl).
#
# Several nodes (CRI_GUARD_CLUSTER_NODES=K, 2 to 6, at `up`; the other verbs
# read the count from $C/nodes.tsv): node 1 is the one above, connected to
# the API server; each other node K (named cg-node-K) is a kubelet, a
# cri-guard connected to the API server and a containerd of its own (the
# binaries rt.sh runs), all three in a network namespace and a mount
# namespace of the node's ($C/ns/nK.net, nK.mnt), with everything under
# $C/nodes/K and the v1 cgroups /$CGC-nK (processes) and /$CGC-nK-pods (pods).
# The network: a bridge $NODE_BRIDGE on the host, $NODE_NET.1, and a veth into
# each node's namespace, $NODE_NET.K; the API server and node 1's kubelet listen
# on $NODE_NET.1 instead of 127.0.0.1 and the API server reaches each kubelet
# by its InternalIP. Each node's pods are on a CNI bridge in its namespace
# (10.244.(87+K).0/24; node 1's the harness's); no pod reaches another node.
# A second docker-registry on $NODE_REG serves the harness registry's store
# read-only to the nodes' containerds; pause and busybox are imported.
# $C/nodes.tsv lists the nodes: number, name, directory (its stats/, cri-guard/).
set -euo pipefail

C=${CRI_GUARD_CLUSTER:-/tmp/cri-guard-cluster}
RT=${CRI_GUARD_RT:-/tmp/cri-guard-rt}
K8S=v1.37.2  # the newest 1.37 on the module proxy; one release for the cluster, the guest (scripts/vm.sh) and
             # tools/kubeletdiff. From 1.35 on the kubelet refuses cgroup v1 hosts unless failCgroupV1: false.
ETCD=v3.7.3  # the newest 3.7 (the etcd Kubernetes 1.37 is tested against)
CACHE=${CRI_GUARD_CACHE:-${HOME:-/root}/.cache/cri-guard}
KBIN=$CACHE/kubernetes-$K8S/bin
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MARK=$C/.cri-guard-cluster
CGC=cri-guard-cluster
# The node name: the apiserver reaches the kubelet by the node's Hostname
# address, and "localhost" is the one name that resolves to 127.0.0.1 from
# /etc/hosts everywhere (the kubelet refuses a loopback --node-ip).
NODE=localhost
ETCD_CLIENT=127.0.0.1:23790
ETCD_PEER=127.0.0.1:23800
API=127.0.0.1:16443
KCM_PORT=10357
SCHED_PORT=10359
KUBELET_PORT=10350
KUBELET_HEALTHZ=10348
GUARD_METRICS=127.0.0.1:19713
SERVICE_CIDR=10.96.0.0/16
NODE_NET=10.244.80          # several nodes: their network, node K at .K
NODE_BRIDGE=cgnodes0
NODE_REG=$NODE_NET.1:5088   # the registry as the nodes' namespaces reach it
export CGO_ENABLED=0

LOG_PREFIX=cluster LOG_WIDTH=6
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SRC/scripts/lib.sh" # ts, die, alive, stop_pid, launch, wait_for, cg_make, ...

need_root

# shellcheck source-path=SCRIPTDIR source=build-runtime.sh
. "$SRC/scripts/build-runtime.sh" # CTRD_DIR: the containerd the extra nodes run (rt.sh builds it)

# The node count: CRI_GUARD_CLUSTER_NODES for `up`, what `up` made for the rest.
NODES=${CRI_GUARD_CLUSTER_NODES:-1}
if [ "${1:-}" != up ] && [ -f "$C/nodes.tsv" ]; then NODES=$(wc -l <"$C/nodes.tsv"); fi
[[ $NODES =~ ^[1-6]$ ]] || die "CRI_GUARD_CLUSTER_NODES=$NODES: 1 to 6"
multi() { [ "$NODES" -gt 1 ]; }
# What the processes of a node use (at_node sets them for nodes 2 and up):
# its directory, pid and log directories, cgroup prefix, cri-guard's
# directory, the commands that enter its namespaces (none for node 1) and
# the --node-ip of its kubelet.
D=$C PIDS=$C/pids LOGS=$C/logs CGP=$CGC GUARD=$C/cri-guard NODE_IP="" ENTER=() NETENTER=()
KUBELET_ADDRESS_TYPES=Hostname
if multi; then
  API=$NODE_NET.1:16443 NODE_IP=$NODE_NET.1 KUBELET_ADDRESS_TYPES=InternalIP,Hostname
fi

# alive_name NAME: the process saved in $PIDS/NAME.pid runs and is the binary NAME.
alive_name() { alive "$PIDS/$1.pid" "$1"; }

# stop NAME SIGNAL: stop the saved process, by PID only.
stop() { stop_pid "$PIDS/$1.pid" "$1" "$2"; }

# launch_named NAME ARGS...: run $KBIN/NAME (or the path in $BIN) in the
# background, in the cgroups /$CGP/NAME of every hierarchy (/$CGC/NAME for
# node 1), through $ENTER (another node's namespaces), detached from this
# shell, its PID in $PIDS/NAME.pid and its output in $LOGS/NAME.log; dies
# when it does not run as NAME within 5 s.
launch_named() {
  local name=$1 bin=${BIN:-$KBIN/$1} p _
  shift
  launch "$PIDS/$name.pid" "$LOGS/$name.log" "$CGP/$name" "${ENTER[@]}" "$bin" "$@"
  p=$(cat "$PIDS/$name.pid") # until the exec: alive_name checks the binary's name
  for _ in $(seq 100); do alive_name "$name" && return 0; [ -d /proc/"$p" ] || break; sleep 0.05; done
  tail -30 "$LOGS/$name.log" >&2
  die "$name did not start (log: $LOGS/$name.log)"
}

# wait_up WHAT SECONDS NAME CMD...: poll CMD until it succeeds; fail when NAME
# dies, or after SECONDS.
wait_up() {
  local what=$1 secs=$2 name=$3 rc=0
  shift 3
  wait_for -p "$PIDS/$name.pid" "$name" "$secs" "$@" || rc=$?
  [ "$rc" = 0 ] && return 0
  tail -30 "$LOGS/$name.log" >&2
  [ "$rc" = 2 ] && die "$name exited (log: $LOGS/$name.log)"
  die "$what not ready after ${secs}s (log: $LOGS/$name.log)"
}

# build: etcd and the Kubernetes binaries of $K8S into $KBIN.
build() {
  if [ ! -x "$KBIN/etcd" ]; then
    ts "build etcd $ETCD"
    local em=$CACHE/kubernetes-$K8S/etcd-mod
    mkdir -p "$em" "$KBIN"
    printf 'module cri-guard.local/etcd-build\n\ngo 1.24.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD" >"$em/go.mod"
    (cd "$em" && go get "go.etcd.io/etcd/server/v3@$ETCD" &&
      go build -trimpath -ldflags '-s -w' -o "$KBIN/etcd.tmp" go.etcd.io/etcd/server/v3)
    mv "$KBIN/etcd.tmp" "$KBIN/etcd"
  fi
  build_k8s "$K8S" kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl
}

# build_k8s VERSION CMD...: the commands k8s.io/kubernetes/cmd/CMD of VERSION
# into $CACHE/kubernetes-VERSION/bin (scripts/compat.sh builds other
# releases' kubelets with it), from their Go modules; a command already there
# is kept. k8s.io/kubernetes replaces its staging modules (k8s.io/api,
# client-go, ...) with directories that its module zip does not hold, so
# neither `go install pkg@version` nor a build inside the module cache works:
# a throwaway module under the cache requires it and points every staging
# module at its v0.x tag. It takes the release's go and godebug lines, so
# the binaries get the GODEBUG defaults the release's own build has.
build_k8s() {
  local ver=$1 c have=1
  shift
  local bin=$CACHE/kubernetes-$ver/bin mod=$CACHE/kubernetes-$ver/mod v=${ver#v1.} s ld p
  for c in "$@"; do [ -x "$bin/$c" ] || have=0; done
  [ $have = 1 ] && return 0
  mkdir -p "$mod" "$bin"
  ts "build Kubernetes $ver: $* (cold: see docs/compatibility.md)"
  # Every staging module the release replaces (./staging/src/k8s.io/X), at its v0.x tag.
  local kdir gd
  kdir=$(go mod download -json "k8s.io/kubernetes@$ver" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
  [ -n "$kdir" ] || die "go mod download k8s.io/kubernetes@$ver failed"
  gd=$(sed -n 's/^godebug default=//p' "$kdir/go.mod")
  {
    printf 'module cri-guard.local/kubernetes-build\n\ngo %s\n\n' "$(sed -n 's/^go //p' "$kdir/go.mod")"
    [ -z "$gd" ] || printf 'godebug default=%s\n\n' "$gd"
    printf 'require k8s.io/kubernetes %s\n\nreplace (\n' "$ver"
    for s in $(awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}' "$kdir/go.mod" | sort -u); do
      printf '\t%s => %s v0.%s\n' "$s" "$s" "$v"
    done
    printf ')\n'
  } >"$mod/go.mod"
  local pkgs=()
  for c in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$c@$ver"); done
  (cd "$mod" && go get "${pkgs[@]}")
  # The version the binaries report (the kubelet's and kubectl's skew checks).
  ld="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $p.gitVersion=$ver -X $p.gitMajor=1 -X $p.gitMinor=${v%%.*} -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  for c in "$@"; do
    [ -x "$bin/$c" ] && continue
    ts "build $c $ver"
    (cd "$mod" && go build -trimpath -ldflags "$ld" -o "$bin/$c.tmp" "k8s.io/kubernetes/cmd/$c")
    mv "$bin/$c.tmp" "$bin/$c"
  done
}

# kubeconfig NAME CERT: $C/NAME.kubeconfig for the client certificate $C/pki/CERT.
kubeconfig() {
  cat >"$C/$1.kubeconfig" <<YAML
apiVersion: v1
kind: Config
clusters:
- name: cri-guard
  cluster: {server: "https://$API", certificate-authority: "$C/pki/ca.crt"}
users:
- name: $1
  user: {client-certificate: "$C/pki/$2.crt", client-key: "$C/pki/$2.key"}
contexts:
- name: $1
  context: {cluster: cri-guard, user: $1}
current-context: $1
YAML
}

configs() {
  mkdir -p "$C"/{bin,logs,pids,etcd,kubelet,pod-logs,manifests,cri-guard/state,stats/proc/pressure,stats/cgroup}
  (cd "$SRC" && go build -o "$C/bin/mkcerts" ./tools/mkcerts)
  "$C/bin/mkcerts" -dir "$C/pki" -node "$NODE" ${NODE_IP:+-ips "$NODE_IP"}
  kubeconfig admin admin
  kubeconfig controller-manager controller-manager
  kubeconfig scheduler scheduler
  kubeconfig kubelet node
  # The fake stats tree cri-guard reads (tests rewrite meminfo for pressure):
  # 16 GiB of memory, 12 GiB available, no PSI stall, no cgroup stats.
  fake_stats "$C/stats"
  # cri-guard: CRI-only (no API connection), fast housekeeping for the tests;
  # every pod in kube-system is critical (a system-node-critical priority is
  # not in the CRI request, so the namespace is how cri-guard knows it).
  cat >"$C/cri-guard/config.yaml" <<YAML
listen: $C/cri-guard/cri-guard.sock
runtimeEndpoint: $RT/containerd.sock
stateDir: $C/cri-guard/state
cgroupRoot: $C/stats/cgroup
procRoot: $C/stats/proc
housekeepingInterval: 1s
evictionHard: {memory.available: 1Gi}
evictionPressureTransitionPeriod: 10s
evictionMaxPodGracePeriod: 5s
psiTrigger: ""
critical: {namespaces: [kube-system]}
metricsAddress: $GUARD_METRICS
adminSocket: $C/cri-guard/admin.sock
log: {level: debug, format: text}
YAML
  # The same cri-guard connected to the API server with the kubelet's own
  # node credentials (start-cri-guard api): priority, requests and
  # tolerations from the API, decisions reported there. No critical
  # namespace: a system-node-critical pod is critical by its priority.
  # A longer transition period: the tests create pods while MemoryPressure
  # holds without a threshold met (so that nothing more is evicted).
  sed -e '/^critical:/d' -e 's/^evictionPressureTransitionPeriod: .*/evictionPressureTransitionPeriod: 60s/' \
    "$C/cri-guard/config.yaml" >"$C/cri-guard/config-api.yaml"
  printf 'kubernetes: {kubeconfig: %s, nodeName: %s}\n' "$C/kubelet.kubeconfig" "$NODE" >>"$C/cri-guard/config-api.yaml"
  # The kubelet: cgroupfs on this v1 host (failCgroupV1 false), pods under a
  # cgroup root of its own, eviction thresholds it never reaches here (only
  # cri-guard acts), no image GC (the harness's images are shared), no
  # iptables chains, everything on 127.0.0.1.
  cat >"$C/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ
tlsCertFile: $C/pki/kubelet.crt
tlsPrivateKeyFile: $C/pki/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $C/pki/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$C/cri-guard/cri-guard.sock
imageServiceEndpoint: unix://$C/cri-guard/cri-guard.sock
cgroupDriver: cgroupfs
cgroupRoot: /$CGC-pods
cgroupsPerQOS: true
enforceNodeAllocatable: [pods]
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
staticPodPath: $C/manifests
fileCheckFrequency: 2s
podLogsDir: $C/pod-logs
evictionHard: {memory.available: 1Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%, imagefs.inodesFree: 1%}
evictionPressureTransitionPeriod: 10s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
makeIPTablesUtilChains: false
rotateCertificates: false
serializeImagePulls: false
YAML
  cat >"$C/env" <<ENV
export CRI_GUARD_CLUSTER=$C
export KUBECONFIG=$C/admin.kubeconfig
export KUBECACHEDIR=$C/kube-cache
export PATH=$C/bin:\$PATH
ENV
  local b
  for b in kubectl etcd kube-apiserver kube-controller-manager kube-scheduler kubelet; do ln -sf "$KBIN/$b" "$C/bin/$b"; done
}

kc() { "$KBIN/kubectl" --kubeconfig "$C/admin.kubeconfig" --cache-dir "$C/kube-cache" --request-timeout 10s "$@"; }

node_ready() {
  [ "$(kc get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

guard_ok() {
  [ -S "$GUARD/cri-guard.sock" ] &&
    CRI_CONFIG_FILE=/dev/null "$RT/bin/crictl" --runtime-endpoint "unix://$GUARD/cri-guard.sock" --timeout 5s version >/dev/null 2>&1
}

# start_apiserver: kube-apiserver on loopback, Node,RBAC and NodeRestriction.
# No endpoint reconciler: the apiserver's only address is 127.0.0.1, which an
# Endpoints object may not hold (nothing here uses the kubernetes Service).
start_apiserver() {
  alive_name kube-apiserver && return 0
  local P=$C/pki
  launch_named kube-apiserver --etcd-servers "http://$ETCD_CLIENT" \
    --bind-address "${API%:*}" --advertise-address "${API%:*}" --secure-port "${API#*:}" \
    --tls-cert-file "$P/apiserver.crt" --tls-private-key-file "$P/apiserver.key" --client-ca-file "$P/ca.crt" \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --kubelet-client-certificate "$P/apiserver-kubelet-client.crt" --kubelet-client-key "$P/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$P/ca.crt" --kubelet-preferred-address-types "$KUBELET_ADDRESS_TYPES" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$P/sa.pub" --service-account-signing-key-file "$P/sa.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" --endpoint-reconciler-type none \
    --cert-dir "$C/apiserver-certs" --profiling=false
  wait_up kube-apiserver 120 kube-apiserver kc get --raw /readyz
}

# start_guard [api]: cri-guard CRI-only, or with the API connection; the
# binary is $CRI_GUARD_CLUSTER_BIN when set (another build, e.g. a baseline to
# compare with: its file must be named cri-guard, which alive_name checks), else
# the one `up` built from this checkout.
start_guard() {
  alive_name cri-guard && return 0
  local cfg=$GUARD/config.yaml bin=${CRI_GUARD_CLUSTER_BIN:-$C/bin/cri-guard}
  [ "${1:-}" = api ] && cfg=$GUARD/config-api.yaml
  [ "$(basename "$bin")" = cri-guard ] && [ -x "$bin" ] || die "CRI_GUARD_CLUSTER_BIN=$bin: not an executable named cri-guard"
  BIN=$bin launch_named cri-guard --config "$cfg"
  wait_up cri-guard 60 cri-guard guard_ok
}

# start_kubelet: the kubelet, its runtime endpoint cri-guard's socket.
start_kubelet() {
  alive_name kubelet && return 0
  launch_named kubelet --config "$D/kubelet.yaml" --kubeconfig "$D/kubelet.kubeconfig" \
    --hostname-override "$NODE" --root-dir "$D/kubelet" --cert-dir "$D/kubelet/pki" ${NODE_IP:+--node-ip "$NODE_IP"}
}

kubelet_healthy() { "${NETENTER[@]}" curl -sf "http://127.0.0.1:$KUBELET_HEALTHZ/healthz"; }

# restart_kubelet: stop the kubelet (SIGTERM, by its saved PID) and start it
# again with the same flags (a kubelet not running is only started);
# cri-guard and containerd keep running. Its status manager then resyncs
# every pod's status from its new, empty cache.
restart_kubelet() {
  local old=none
  if alive_name kubelet; then old=$(cat "$PIDS/kubelet.pid"); fi
  stop kubelet TERM
  start_kubelet
  wait_up "kubelet healthz" 60 kubelet kubelet_healthy
  ts "kubelet restarted: pid $old -> $(cat "$PIDS/kubelet.pid")"
}

# ---- several nodes (CRI_GUARD_CLUSTER_NODES) ----

# at_node K CMD ARGS...: CMD with node K's directories, cgroups and namespaces
# in the variables that launch_named, alive_name, stop and the start_*
# functions read; node 1's are the globals.
at_node() {
  local K=$1
  shift
  if [ "$K" = 1 ]; then
    "$@"
    return
  fi
  local D=$C/nodes/$K NODE=cg-node-$K NODE_IP=$NODE_NET.$K
  local PIDS=$D/pids LOGS=$D/logs CGP=$CGC-n$K GUARD=$D/cri-guard NSNET=$C/ns/n$K.net NSMNT=$C/ns/n$K.mnt
  local ENTER=(nsenter --net="$NSNET" --mount="$NSMNT" --) NETENTER=(nsenter --net="$NSNET" --)
  "$@"
}

# extra_nodes: the numbers of the nodes past the first that `up` made.
extra_nodes() {
  local d
  for d in "$C"/nodes/[0-9]*; do [ -d "$d" ] && basename "$d"; done
  return 0
}

# nodes_network: the host's side of the nodes' network, the registry they
# pull from, and the directory of their namespace files (a private mount,
# as binding a namespace needs).
nodes_network() {
  mkdir -p "$C/nodes" "$C/ns"
  ip link del "$NODE_BRIDGE" 2>/dev/null || true # a killed run's, by its name
  ip link add "$NODE_BRIDGE" type bridge
  ip addr add "$NODE_NET.1/24" dev "$NODE_BRIDGE"
  ip link set "$NODE_BRIDGE" up
  mount --bind "$C/ns" "$C/ns"
  mount --make-private "$C/ns"
  local d
  for d in /var/lib/kubelet /var/log/containers /var/lib/cni /run/containerd; do mkdir -p "$d"; done
  # The harness registry's store, read-only, on the nodes' network.
  cat >"$C/registry-nodes.yml" <<YML
version: 0.1
log: {level: warn, accesslog: {disabled: true}}
storage:
  filesystem: {rootdirectory: $RT/registry-data}
  maintenance: {uploadpurging: {enabled: false}, readonly: {enabled: true}}
http: {addr: $NODE_REG}
YML
  BIN=$(command -v docker-registry) launch_named docker-registry serve "$C/registry-nodes.yml"
  wait_up "registry on $NODE_REG" 30 docker-registry curl -sf "http://$NODE_REG/v2/"
}

# node_setup (at_node): node K's files, certificates and namespaces.
node_setup() {
  mkdir -p "$D"/{pids,logs,kubelet,pod-logs,manifests,pki,cri-guard/state,stats/proc/pressure,stats/cgroup}
  fake_stats "$D/stats"
  # Its own identity from the cluster's CA: system:node:$NODE, and a serving
  # certificate for its address. The CA's key does not stay.
  cp "$C/pki/ca.crt" "$C/pki/ca.key" "$D/pki/"
  "$C/bin/mkcerts" -dir "$D/pki" -node "$NODE" -ips "$NODE_IP"
  find "$D/pki" -type f ! -name ca.crt ! -name 'node.*' ! -name 'kubelet.*' -delete
  sed "s#$C/pki/node\.#$D/pki/node.#g" "$C/kubelet.kubeconfig" >"$D/kubelet.kubeconfig"
  sed -e "s#^address: .*#address: $NODE_IP#" -e "s#$C/pki/kubelet\.#$D/pki/kubelet.#g" -e "s#$C/cri-guard/#$GUARD/#g" \
    -e "s#^cgroupRoot: .*#cgroupRoot: /$CGP-pods#" -e "s#^staticPodPath: .*#staticPodPath: $D/manifests#" \
    -e "s#^podLogsDir: .*#podLogsDir: $D/pod-logs#" "$C/kubelet.yaml" >"$D/kubelet.yaml"
  local f
  for f in config.yaml config-api.yaml; do
    sed -e "s#$C/cri-guard/#$GUARD/#g" -e "s#$C/stats/#$D/stats/#g" -e "s#$RT/containerd.sock#$D/ctrd/containerd.sock#" \
      -e "s#kubeconfig: $C/kubelet.kubeconfig, nodeName: [^}]*#kubeconfig: $D/kubelet.kubeconfig, nodeName: $NODE#" \
      "$C/cri-guard/$f" >"$GUARD/$f"
  done
  if grep -n "$C/" "$D/kubelet.yaml" "$GUARD"/config*.yaml | grep -v -e "$D/" -e "$C/pki/ca.crt"; then
    die "$NODE: paths of node 1 left in its configs (above)"
  fi
  CRI_GUARD_RT=$RT "$SRC/scripts/rt.sh" node-config "$D/ctrd" "$CGP" "$NODE_REG" "10.244.$((87 + K)).0/24" "$CGP"
  cg_make "$CGP-pods"

  touch "$NSNET" "$NSMNT"
  unshare --net="$NSNET" true
  ip link add "cgv$K" type veth peer name eth0 netns "$NSNET"
  ip link set "cgv$K" master "$NODE_BRIDGE" up
  "${NETENTER[@]}" sh -c "ip link set lo up && ip addr add $NODE_IP/24 dev eth0 && ip link set eth0 up"
  # The mount namespace: a copy of the host's without the harness's and the
  # cluster's own mounts (node 1's pods, the other nodes' namespaces: a copy
  # would keep them alive), and with directories of its own over the paths
  # a kubelet, a containerd and its shims use whatever their configuration
  # (the device plugin socket, the container log links, CNI's cache, the
  # shims' sockets).
  # shellcheck disable=SC2016 # expanded by the inner bash
  unshare --mount="$NSMNT" --propagation private bash -c 'set -e
    findmnt -rn -o TARGET | awk -v a="$1/" -v b="$2/" "index(\$0, a) == 1 || index(\$0, b) == 1" | sort -r |
      while read -r m; do umount -l "$m"; done
    for p in /var/lib/kubelet /var/log/containers /var/lib/cni /run/containerd; do
      mkdir -p "$3/host$p"
      mount --bind "$3/host$p" "$p"
    done' _ "$RT" "$C" "$D"
}

# node_start (at_node): node K's containerd, cri-guard (connected to the API
# server) and kubelet, in its namespaces.
node_start() {
  alive_name containerd || {
    rm -f "$D/ctrd/containerd.sock" "$D/ctrd/containerd.sock.ttrpc"
    BIN=$CTRD_DIR/containerd launch_named containerd --config "$D/ctrd/containerd.toml"
    wait_up "containerd of $NODE" 60 containerd "$CTRD_DIR/ctr" -a "$D/ctrd/containerd.sock" version
    local i
    for i in pause busybox; do
      CONTAINERD_SUPPRESS_DEPRECATION_WARNINGS=1 "$CTRD_DIR/ctr" -a "$D/ctrd/containerd.sock" -n k8s.io images import "$RT/images/$i.tar" >/dev/null
    done
  }
  start_guard api
  start_kubelet
}

node_ok() { alive_name containerd && alive_name cri-guard && alive_name kubelet && node_ready; }

# node_down (at_node): stop node K's processes, its pods and shims, remove
# its cgroups and its veth; its namespaces go with their files' mounts.
node_down() {
  stop kubelet TERM
  if alive_name containerd && [ -x "$RT/bin/crictl" ]; then
    CRI_CONFIG_FILE=/dev/null timeout 60 "$RT/bin/crictl" --runtime-endpoint "unix://$D/ctrd/containerd.sock" rmp -af >/dev/null 2>&1 || true
  fi
  stop cri-guard TERM
  stop containerd TERM
  cg_kill "$CGP-pods"
  cg_kill "$CGP"
  cg_rmdir "$CGP" "$CGP-pods"
  local c
  for c in /sys/fs/cgroup/*/"$CGP" /sys/fs/cgroup/*/"$CGP-pods"; do
    [ -d "$c" ] && echo "cluster.sh: cgroup $c left (processes still in it?)" >&2
  done
  ip link del "cgv$K" 2>/dev/null || true
}

# node_verb K VERB ARGS...: the per-node verbs.
node_verb() {
  [ -f "$MARK" ] || die "not up"
  local k=${1:-} v=${2:-}
  if ! [[ $k =~ ^[1-9]$ ]] || [ "$k" -gt "$NODES" ]; then die "node '$k': the cluster has $NODES node(s)"; fi
  shift 2 || shift $#
  case "$v" in
  kill-cri-guard) at_node "$k" stop cri-guard KILL ;;
  start-cri-guard) at_node "$k" start_guard "${1:-}" ;;
  restart-kubelet) at_node "$k" restart_kubelet ;;
  exec) [ $# -gt 0 ] || die "usage: $0 node K exec CMD..."; at_node "$k" node_exec "$@" ;;
  *) die "usage: $0 node K kill-cri-guard|start-cri-guard [api]|restart-kubelet|exec CMD..." ;;
  esac
}

node_exec() { exec "${ENTER[@]}" "$@"; }

up_ok() {
  local n
  for n in etcd kube-apiserver kube-controller-manager kube-scheduler cri-guard kubelet; do alive_name $n || return 1; done
  node_ready || return 1
  local k
  for k in $(seq 2 "$NODES"); do at_node "$k" node_ok || return 1; done
}

# up_nodes: how many nodes the cluster that is up has.
up_nodes() { if [ -f "$C/nodes.tsv" ]; then wc -l <"$C/nodes.tsv"; else echo 1; fi; }

up() {
  if [ -f "$MARK" ] && up_ok && [ "$(up_nodes)" = "$NODES" ]; then
    ts "already up: source $C/env"
    return 0
  fi
  [ -e "$C" ] && down # stale leftovers of a killed run
  build
  CRI_GUARD_RT=$RT "$SRC/scripts/rt.sh" up
  mkdir -p "$C" && touch "$MARK"
  # Two fixed host paths the kubelet uses whatever its --root-dir: down
  # removes what it put there, and the directories if they were not there before.
  kubelet_dirs_note "$C"
  local d
  if multi; then for d in /var/lib/cni /run/containerd; do [ -d $d ] || echo $d >>"$C/made-host-dirs"; done; fi
  ts "configs, PKI, cri-guard"
  configs
  local k
  if multi; then
    # Every node's cri-guard connected to the API server, with the
    # CRI-only config's transition period (an episode's calm is 10 s).
    sed -i 's/^evictionPressureTransitionPeriod: .*/evictionPressureTransitionPeriod: 10s/' "$C/cri-guard/config-api.yaml"
    sed -i "s/^address: 127.0.0.1\$/address: $NODE_IP/" "$C/kubelet.yaml"
    ts "nodes 2-$NODES: network, namespaces, configs"
    nodes_network
    printf '1\t%s\t%s\n' "$NODE" "$C" >"$C/nodes.tsv"
    for k in $(seq 2 "$NODES"); do
      at_node "$k" node_setup
      printf '%s\tcg-node-%s\t%s\n' "$k" "$k" "$C/nodes/$k" >>"$C/nodes.tsv"
    done
  fi
  (cd "$SRC" && go build -tags grpcnotrace -trimpath -ldflags '-s -w' -o "$C/bin/cri-guard" ./cmd/cri-guard)
  cg_make "$CGC-pods" # the kubelet's cgroupRoot must exist

  ts "etcd"
  # A throwaway test store: no fsync (etcd's latency on a shared disk is the
  # apiserver's, and nothing here outlives `down`).
  launch_named etcd --name cri-guard --data-dir "$C/etcd" --unsafe-no-fsync \
    --listen-client-urls "http://$ETCD_CLIENT" --advertise-client-urls "http://$ETCD_CLIENT" \
    --listen-peer-urls "http://$ETCD_PEER" --initial-advertise-peer-urls "http://$ETCD_PEER" \
    --initial-cluster "cri-guard=http://$ETCD_PEER"
  wait_up etcd 60 etcd curl -sf "http://$ETCD_CLIENT/health"

  ts "kube-apiserver"
  start_apiserver

  ts "kube-controller-manager, kube-scheduler"
  local P=$C/pki
  launch_named kube-controller-manager --kubeconfig "$C/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$C/controller-manager.kubeconfig" --authorization-kubeconfig "$C/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$KCM_PORT" --leader-elect=false \
    --service-account-private-key-file "$P/sa.key" --root-ca-file "$P/ca.crt" --use-service-account-credentials \
    --cluster-signing-cert-file "$P/ca.crt" --cluster-signing-key-file "$P/ca.key" --profiling=false
  launch_named kube-scheduler --kubeconfig "$C/scheduler.kubeconfig" \
    --authentication-kubeconfig "$C/scheduler.kubeconfig" --authorization-kubeconfig "$C/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --leader-elect=false --profiling=false
  wait_up kube-controller-manager 60 kube-controller-manager curl -sfk "https://127.0.0.1:$KCM_PORT/healthz"
  wait_up kube-scheduler 60 kube-scheduler curl -sfk "https://127.0.0.1:$SCHED_PORT/healthz"

  ts "cri-guard"
  if multi; then start_guard api; else start_guard; fi

  ts "kubelet"
  start_kubelet
  for k in $(seq 2 "$NODES"); do
    ts "node $k: containerd, cri-guard, kubelet"
    at_node "$k" node_start
  done
  wait_up "node $NODE Ready" 120 kubelet node_ready
  for k in $(seq 2 "$NODES"); do at_node "$k" wait_up "node cg-node-$k Ready" 120 kubelet node_ready; done
  # Pods can be created once the default service account and root CA exist.
  wait_up "default service account" 60 kube-controller-manager kc -n default get serviceaccount default
  wait_up "kube-root-ca.crt" 60 kube-controller-manager kc -n default get configmap kube-root-ca.crt
  ts "ready: source $C/env   (kubectl get nodes)"
}

# kubelet_sandboxes: the ids of the sandboxes in the harness containerd that a
# kubelet made (they carry the io.kubernetes.pod.uid label; rt.sh's tests' do not).
kubelet_sandboxes() {
  local id
  for id in $(rtctl pods -q 2>/dev/null || true); do
    [ -n "$(rtctl inspectp -o go-template --template '{{index .status.labels "io.kubernetes.pod.uid"}}' "$id" 2>/dev/null)" ] &&
      echo "$id"
  done
  return 0
}

# rtctl ARGS...: crictl on the harness containerd, directly.
rtctl() { CRI_CONFIG_FILE=/dev/null timeout 60 "$RT/bin/crictl" --runtime-endpoint "unix://$RT/containerd.sock" "$@"; }

down() {
  [ -e "$C" ] || return 0
  [ -f "$MARK" ] || die "$C exists but was not made by cluster.sh (no $MARK): not touching it"
  ts "down"
  local k jobs=()
  for k in $(extra_nodes); do # side by side: each waits seconds for its processes to stop
    at_node "$k" node_down &
    jobs+=("$!")
  done
  for k in "${jobs[@]}"; do wait "$k" || true; done
  stop kubelet TERM
  if [ -S "$RT/containerd.sock" ] && [ -x "$RT/bin/crictl" ]; then
    local id
    for id in $(kubelet_sandboxes); do
      rtctl stopp "$id" >/dev/null 2>&1 || true
      rtctl rmp -f "$id" >/dev/null 2>&1 || true
    done
  fi
  local n
  for n in cri-guard kube-scheduler kube-controller-manager kube-apiserver etcd; do stop $n TERM; done
  if [ -d "$C/nodes" ]; then
    stop docker-registry TERM
    ip link del "$NODE_BRIDGE" 2>/dev/null || true
  fi
  umount_under "$C"
  # The kubelet links every container log into /var/log/containers and
  # listens for device plugins on /var/lib/kubelet/device-plugins/kubelet.sock.
  kubelet_dirs_clean "$C"
  cg_rmdir "$CGC" "$CGC-pods"
  local c
  for c in /sys/fs/cgroup/*/"$CGC" /sys/fs/cgroup/*/"$CGC-pods"; do
    [ -d "$c" ] && echo "cluster.sh: cgroup $c left (processes still in it?)" >&2
  done
  rm_unmounted "$C"
  ts "down done"
}

case "${1:-}" in
build) build ;;
build-kubelet) [ -n "${2:-}" ] || die "usage: $0 build-kubelet VERSION"; build_k8s "$2" kubelet; echo "$CACHE/kubernetes-$2/bin/kubelet" ;;
kbin) echo "$KBIN" ;;
up) up ;;
down) down ;;
status) up_ok ;;
kill-cri-guard) stop cri-guard KILL ;;
start-cri-guard) [ -f "$MARK" ] || die "not up"; start_guard "${2:-}" ;;
stop-apiserver) stop kube-apiserver TERM ;;
start-apiserver) [ -f "$MARK" ] || die "not up"; start_apiserver ;;
restart-kubelet) [ -f "$MARK" ] || die "not up"; restart_kubelet ;;
node) shift; node_verb "$@" ;;
*) die "usage: $0 build|up|down|status|kill-cri-guard|start-cri-guard [api]|stop-apiserver|start-apiserver|restart-kubelet|node K VERB" ;;
esac
