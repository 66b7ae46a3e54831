#!/bin/bash
# provision.sh: runs in the guest (scripts/vm.sh up), as an operator would set
# up a node: containerd 2.x and runc under systemd (SystemdCgroup), the test
# images, cri-guard from its .deb (postinst enables and starts it), then
# cri-guard's config for the tests, then a kubelet unit with cri-guard's
# shipped drop-in. /vm is the host's share (hostfs).
set -euo pipefail
V=/vm
G=$V/guest
step() { echo "[provision $(cut -d' ' -f1 /proc/uptime)s] $*"; }

step "binaries"
for b in containerd containerd-shim-runc-v2 ctr runc crictl kubelet memhog; do
  install -m 0755 "$V/bin/$b" /usr/local/bin/
done
install -m 0644 "$G/containerd.toml" /etc/containerd/config.toml
install -m 0644 "$G/10-bridge.conflist" /etc/cni/net.d/10-bridge.conflist
install -m 0644 "$G/crictl.yaml" /etc/crictl.yaml
# containerd's own unit; UML has no modules to load.
sed 's|^ExecStartPre=.*modprobe.*||' "$V/containerd.service" >/etc/systemd/system/containerd.service
systemctl daemon-reload
step "containerd"
systemctl enable --now containerd
for i in $(seq 60); do ctr version >/dev/null 2>&1 && break; sleep 1; done
for i in pause busybox; do ctr -n k8s.io images import "$V/images/$i.tar" >/dev/null; done

step "cri-guard from its package"
deb=$(ls "$V"/deb/cri-guard_*_amd64.deb | grep -v '+upgrade' | head -1)
dpkg -i "$deb"
systemctl is-active cri-guard
# The operator's configuration (the conffile, edited: kept on upgrade).
install -m 0644 "$G/cri-guard.yaml" /etc/cri-guard/config.yaml
cri-guard check-config /etc/cri-guard/config.yaml >/dev/null
systemctl restart cri-guard

step "kubelet with cri-guard's drop-in"
mkdir -p /etc/kubernetes/manifests /var/lib/kubelet /etc/systemd/system/kubelet.service.d
install -m 0644 "$G/kubelet.yaml" /etc/kubernetes/kubelet.yaml
install -m 0644 "$G/kubelet.service" /etc/systemd/system/kubelet.service
cp /usr/share/cri-guard/kubelet.service.d/10-cri-guard.conf /etc/systemd/system/kubelet.service.d/
systemctl daemon-reload
systemctl enable --now kubelet
# The kubelet creates kubepods.slice with memory.max = its allocatable.
for i in $(seq 180); do [ -e /sys/fs/cgroup/kubepods.slice/memory.max ] && break; sleep 1; done
[ -e /sys/fs/cgroup/kubepods.slice/memory.max ] || { journalctl -u kubelet --no-pager | tail -40; exit 1; }
step "kubepods.slice memory.max $(cat /sys/fs/cgroup/kubepods.slice/memory.max)"

step "static pods: critical, sleeper"
cp "$G"/manifests/critical.yaml "$G"/manifests/sleeper.yaml /etc/kubernetes/manifests/
for i in $(seq 300); do
  n=$(crictl ps --state running -o json 2>/dev/null | jq '[.containers[] | select(.metadata.name == "sleeper")] | length' 2>/dev/null || echo 0)
  [ "${n:-0}" -ge 2 ] && break
  sleep 2
done
crictl pods
[ "${n:-0}" -ge 2 ] || { journalctl -u kubelet --no-pager | grep -E '^.{0,60}[EW][0-9]{4}' | tail -30; exit 1; }
step "static pods running"
step "done"
