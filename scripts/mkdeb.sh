#!/usr/bin/env bash
# mkdeb.sh BINARY VERSION OUTDIR: the cri-guard Debian package, with dpkg-deb.
#
#   /usr/bin/cri-guard                       the static binary (make build)
#   /lib/systemd/system/cri-guard.service    contrib/systemd/cri-guard.service, ExecStart /usr/bin
#   /etc/cri-guard/config.yaml               contrib/config.yaml, a conffile (kept on upgrade)
#   /usr/share/cri-guard/kubelet.service.d/10-cri-guard.conf
#                                            the kubelet drop-in, opt-in: copy it to
#                                            /etc/systemd/system/kubelet.service.d/
#   postinst checks /etc/cri-guard/config.yaml with the new binary (check-config;
#   a rejected config fails the installation and leaves a running cri-guard
#   alone), then enables and starts the service (restarts it on upgrade); prerm
#   stops it on removal, and refuses the removal while a kubelet drop-in names
#   cri-guard's socket (CRI_GUARD_FORCE_REMOVE=1 overrides); postrm purge
#   removes /var/lib/cri-guard and /etc/cri-guard.
set -euo pipefail
bin=$1 version=$2 out=$3
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOG_PREFIX=mkdeb
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$src/scripts/lib.sh" # die
[ -x "$bin" ] || die "no binary $bin"
command -v dpkg-deb >/dev/null || die "dpkg-deb not found (apt-get install dpkg)"
arch=$(dpkg --print-architecture)
r=$(mktemp -d)
chmod 0755 "$r"
trap 'rm -rf "$r"' EXIT
install -D -m 0755 "$bin" "$r/usr/bin/cri-guard"
sed 's|/usr/local/bin/cri-guard|/usr/bin/cri-guard|g' "$src/contrib/systemd/cri-guard.service" >"$r/cri-guard.service"
install -D -m 0644 "$r/cri-guard.service" "$r/lib/systemd/system/cri-guard.service"
rm "$r/cri-guard.service"
install -D -m 0644 "$src/contrib/config.yaml" "$r/etc/cri-guard/config.yaml"
install -D -m 0644 "$src/contrib/systemd/kubelet.service.d/10-cri-guard.conf" \
  "$r/usr/share/cri-guard/kubelet.service.d/10-cri-guard.conf"
install -D -m 0644 "$src/README.md" "$r/usr/share/doc/cri-guard/README.md"
# the README links into docs/: ship them beside it so the links resolve
for f in "$src"/docs/*.md; do install -D -m 0644 "$f" "$r/usr/share/doc/cri-guard/docs/${f##*/}"; done
mkdir -p "$r/DEBIAN"
install -m 0755 "$src"/contrib/deb/{postinst,prerm,postrm} "$r/DEBIAN/"
echo /etc/cri-guard/config.yaml >"$r/DEBIAN/conffiles"
cat >"$r/DEBIAN/control" <<CONTROL
Package: cri-guard
Version: $version
Architecture: $arch
Maintainer: cri-guard developers <cri-guard@localhost>
Section: admin
Priority: optional
Installed-Size: $(du -sk "$r" | cut -f1)
Recommends: containerd | containerd.io
Homepage: https://github.com/cri-guard/cri-guard
Description: memory-pressure admission and eviction in front of containerd
 cri-guard sits between the kubelet and containerd on the CRI socket. It refuses
 BestEffort pods under memory pressure, evicts ranked non-critical pods before
 the kernel's OOM killer acts (PSI, kernel notifications, a fast poll), and
 checkpoints every admitted sandbox so that decisions survive restarts.
CONTROL
mkdir -p "$out"
f=$out/cri-guard_${version}_$arch.deb
dpkg-deb --root-owner-group -Zxz --build "$r" "$f" >/dev/null
echo "$f"
