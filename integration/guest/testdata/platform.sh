# The platform, as an operator would check it; key=value lines for the test.
echo "cgroupfs=$(stat -fc %T /sys/fs/cgroup)"
echo "controllers=$(cat /sys/fs/cgroup/cgroup.controllers)"
echo "kernel=$(uname -r)"
echo "systemd=$(systemctl --version | head -1)"
echo "pid1=$(cat /proc/1/comm)"
echo "containerd=$(containerd --version)"
echo "runc=$(runc --version | head -1)"
echo "kubelet=$(kubelet --version)"
echo "dpkg=$(dpkg-query -W -f='${Status} ${Version}' cri-guard)"
echo "active=$(systemctl is-active cri-guard)"
echo "kubelet_active=$(systemctl is-active kubelet)"
echo "--- dpkg -s cri-guard"; dpkg -s cri-guard | sed 's/^/  /'
echo "--- systemctl status cri-guard"; systemctl status cri-guard --no-pager -l | head -14 | sed 's/^/  /'
echo "--- cri-guard status"; cri-guard status | sed 's/^/  /'
s=$(cri-guard status --json)
echo "source=$(jq -r .source <<<"$s")"
jq -r '.signals[] | "signal=\(.signal) \(.value)"' <<<"$s"
echo "--- journal"; journalctl -u cri-guard --no-pager -o cat | grep -E 'memory stats source|psi trigger|memcg|serving|restore' | tail -8 | sed 's/^/  /'
echo "psi_armed=$(journalctl -u cri-guard --no-pager -o cat | grep -c 'psi trigger armed')"
echo "psi_trigger=$(journalctl -u cri-guard --no-pager -o cat | grep 'psi trigger armed' | tail -1 | sed -n 's/.*trigger="\?\([^"]*\)"\?.*/\1/p')"
echo "--- crictl (through cri-guard)"; crictl version | sed 's/^/  /'
echo "crictl_runtime=$(crictl version | awk '/RuntimeName/{print $2}')"
