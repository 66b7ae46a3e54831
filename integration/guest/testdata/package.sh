# The package: upgrade (pods untouched, state and config kept, the kubelet not
# restarted), from the same tree and from the release before it, an upgrade refused for its config, a removal refused while the
# kubelet uses cri-guard, then purge (nothing left), then install again (the
# node as before).
. "$(dirname "$0")/common.sh"
old=$(ls /vm/deb/cri-guard_*_amd64.deb | grep -v '+upgrade' | head -1)
new=$(ls /vm/deb/cri-guard_*+upgrade_amd64.deb | head -1)
# upgrade_to DEB: install DEB over the running package and say what it kept.
upgrade_to() {
  echo "from=$(dpkg-query -W -f='${Version}' cri-guard)"
  sb=$(ready_sandboxes); ct=$(running_containers)
  kid=$(systemctl show -p InvocationID --value kubelet); gpid=$(mainpid)
  state=$(records); conf=$(md5sum </etc/cri-guard/config.yaml)
  echo "records_before=$(records | wc -w)"
  DEBIAN_FRONTEND=noninteractive dpkg -i --force-confdef --force-confold "$1" 2>&1 | sed 's/^/# /'
  wait_for 120 systemctl is-active cri-guard
  echo "to=$(dpkg-query -W -f='${Version}' cri-guard)"
  echo "version=$(cri-guard version)"
  echo "active=$(systemctl is-active cri-guard)"
  echo "restarted=$([ "$(mainpid)" != "$gpid" ] && echo yes || echo no)"
  echo "kubelet_restarted=$([ "$(systemctl show -p InvocationID --value kubelet)" != "$kid" ] && echo yes || echo no)"
  echo "config_kept=$([ "$(md5sum </etc/cri-guard/config.yaml)" = "$conf" ] && echo yes || echo no)"
  echo "state_kept=$([ "$(records)" = "$state" ] && echo yes || echo "no: before $state after $(records)")"
  echo "sandboxes_kept=$([ "$(ready_sandboxes)" = "$sb" ] && echo yes || echo "no: before $sb after $(ready_sandboxes)")"
  echo "containers_kept=$([ "$(running_containers)" = "$ct" ] && echo yes || echo "no: before $ct after $(running_containers)")"
  echo "restore=$(journalctl -u cri-guard --no-pager -o cat _PID="$(mainpid)" | grep -m1 'restore done')"
}
# records: the checkpoint records of the state directory, one line, sorted
# (other files there, such as the last good config, are not records).
records() { ls /var/lib/cri-guard | grep '\.json$' | sort | tr '\n' ' '; }
case "$1" in
upgrade)
  upgrade_to "$new"
  ;;
upgrade-from-previous)
  # The release before this tree's, as a node runs it, upgraded to this
  # tree's package: put the previous release in place (purge, install, the
  # operator's config), let it adopt the running pods, then upgrade.
  prev=$(ls /vm/deb-prev/cri-guard_*_amd64.deb | head -1)
  cp /etc/cri-guard/config.yaml /tmp/config.yaml.keep
  CRI_GUARD_FORCE_REMOVE=1 DEBIAN_FRONTEND=noninteractive dpkg -P cri-guard 2>&1 | sed 's/^/# /'
  DEBIAN_FRONTEND=noninteractive dpkg -i "$prev" 2>&1 | sed 's/^/# /'
  install -m 0644 /tmp/config.yaml.keep /etc/cri-guard/config.yaml
  systemctl restart cri-guard
  wait_for 120 systemctl is-active cri-guard
  wait_for 120 sh -c '[ "$(ls /var/lib/cri-guard | grep -c "\.json$")" -gt 0 ]'
  echo "previous=$(cri-guard version)"
  upgrade_to "$old"
  ;;
upgrade-rejected)
  # A config the new binary rejects fails the upgrade in postinst: the
  # running cri-guard is left serving; once the file is fixed, dpkg
  # --configure -a finishes the upgrade and restarts it.
  gpid=$(mainpid)
  cp /etc/cri-guard/config.yaml /tmp/config.yaml.good
  sed -i 's/^housekeepingInterval:.*/housekeepingInterval: -1s/' /etc/cri-guard/config.yaml
  out=$(DEBIAN_FRONTEND=noninteractive dpkg -i --force-confdef --force-confold "$new" 2>&1); rc=$?
  sed 's/^/# /' <<<"$out"
  echo "dpkg_exit=$rc"
  echo "problem_named=$(grep -c 'housekeepingInterval: must be at least' <<<"$out")"
  echo "db_status=$(dpkg-query -W -f='${db:Status-Status}' cri-guard)"
  echo "same_pid=$([ "$(mainpid)" = "$gpid" ] && echo yes || echo no)"
  echo "active=$(systemctl is-active cri-guard)"
  echo "cri=$(crictl version >/dev/null 2>&1 && echo ok || echo fail)"
  cp /tmp/config.yaml.good /etc/cri-guard/config.yaml
  DEBIAN_FRONTEND=noninteractive dpkg --configure -a 2>&1 | sed 's/^/# /'
  wait_for 120 systemctl is-active cri-guard
  echo "configured_status=$(dpkg-query -W -f='${db:Status-Status}' cri-guard)"
  echo "configured_active=$(systemctl is-active cri-guard)"
  echo "configured_restarted=$([ "$(mainpid)" != "$gpid" ] && echo yes || echo no)"
  ;;
remove-refused)
  # prerm refuses dpkg -r while the kubelet's drop-in points it at
  # cri-guard's socket; nothing is stopped or removed.
  gpid=$(mainpid)
  ls /etc/systemd/system/kubelet.service.d/ | sed 's/^/# drop-in: /'
  out=$(DEBIAN_FRONTEND=noninteractive dpkg -r cri-guard 2>&1); rc=$?
  sed 's/^/# /' <<<"$out"
  echo "dpkg_exit=$rc"
  echo "refused=$(grep -c 'not removed: the kubelet uses' <<<"$out")"
  echo "names_drop_in=$(grep -c '/etc/systemd/system/kubelet.service.d/10-cri-guard.conf' <<<"$out")"
  echo "db_status=$(dpkg-query -W -f='${db:Status-Status}' cri-guard)"
  echo "binary=$([ -x /usr/bin/cri-guard ] && echo present || echo absent)"
  echo "same_pid=$([ "$(mainpid)" = "$gpid" ] && echo yes || echo no)"
  echo "active=$(systemctl is-active cri-guard)"
  echo "enabled=$(systemctl is-enabled cri-guard)"
  echo "cri=$(crictl version >/dev/null 2>&1 && echo ok || echo fail)"
  # dpkg -r marked the package for removal; keep it selected for install.
  echo cri-guard install | dpkg --set-selections
  ;;
purge)
  cp /etc/cri-guard/config.yaml /tmp/config.yaml.keep
  # The kubelet's drop-in is still installed: prerm refuses without the override.
  CRI_GUARD_FORCE_REMOVE=1 DEBIAN_FRONTEND=noninteractive dpkg -P cri-guard 2>&1 | sed 's/^/# /'
  echo "dpkg=$(dpkg-query -W -f='${Status}' cri-guard 2>/dev/null || echo absent)"
  echo "unit_loaded=$(systemctl show -p LoadState --value cri-guard)"
  echo "unit_files=$(find /etc/systemd /lib/systemd /usr/lib/systemd -name 'cri-guard*' 2>/dev/null | tr '\n' ' ')"
  echo "state_dir=$([ -e /var/lib/cri-guard ] && echo present || echo absent)"
  echo "config_dir=$([ -e /etc/cri-guard ] && echo present || echo absent)"
  echo "binary=$([ -e /usr/bin/cri-guard ] && echo present || echo absent)"
  echo "process=$(pgrep -x cri-guard >/dev/null && echo running || echo none)"
  # Install again, with the operator's config, for the tests after this one.
  DEBIAN_FRONTEND=noninteractive dpkg -i "$old" >/dev/null 2>&1
  install -m 0644 /tmp/config.yaml.keep /etc/cri-guard/config.yaml
  systemctl restart cri-guard
  echo "reinstalled=$(systemctl is-active cri-guard)"
  ;;
*) echo "usage: package.sh upgrade|upgrade-from-previous|upgrade-rejected|remove-refused|purge" >&2; exit 2 ;;
esac
