#!/usr/bin/env bash
# promtool.sh: prints the path of a promtool, fetched once from Debian's
# prometheus package without installing it (no service, no user, no
# maintainer scripts run): apt-get download into ~/.cache/cri-guard/dl, then
# dpkg-deb -x of the package's usr/bin/promtool into ~/.cache/cri-guard/promtool.
# A promtool on PATH is used as it is. On a fresh machine whose package lists
# are empty the download fails once; apt-get update runs and it is retried.
#
#   scripts/promtool.sh                 print the path
#   scripts/promtool.sh check rules F   run promtool with these arguments
set -euo pipefail
LOG_PREFIX=promtool
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib.sh" # die

cache=${XDG_CACHE_HOME:-$HOME/.cache}/cri-guard
dl=$cache/dl
dest=$cache/promtool
bin=$dest/usr/bin/promtool

find_promtool() {
	if command -v promtool >/dev/null 2>&1; then
		command -v promtool
	elif [[ -x $bin ]]; then
		echo "$bin"
	else
		return 1
	fi
}

fetch() {
	mkdir -p "$dl"
	local deb
	# apt-get download writes into the current directory; a package
	# downloaded before is unpacked again rather than fetched again
	if compgen -G "$dl/prometheus_*.deb" >/dev/null; then
		:
	elif ! (cd "$dl" && apt-get download -q -o APT::Sandbox::User=root prometheus >&2); then
		echo "promtool.sh: apt-get download prometheus failed; apt-get update, then again" >&2
		apt-get update -q >&2
		(cd "$dl" && apt-get download -q -o APT::Sandbox::User=root prometheus >&2)
	fi
	deb=$(ls -t "$dl"/prometheus_*.deb | head -n1)
	rm -rf "$dest.tmp"
	mkdir -p "$dest.tmp"
	dpkg-deb -x "$deb" "$dest.tmp"
	[[ -x $dest.tmp/usr/bin/promtool ]] || die "$deb has no usr/bin/promtool"
	# keep only the binary: the package also carries the server and its web assets
	rm -rf "$dest"
	mkdir -p "$dest/usr/bin"
	mv "$dest.tmp/usr/bin/promtool" "$bin"
	rm -rf "$dest.tmp"
}

p=$(find_promtool) || { fetch; p=$bin; }
if [[ $# -eq 0 ]]; then
	echo "$p"
else
	exec "$p" "$@"
fi
