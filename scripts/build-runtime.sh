# build-runtime.sh: sourced (not run) by scripts/rt.sh and scripts/vm.sh: the
# one containerd 2.x and runc build that the host harness and the UML guest
# both run, from their Go modules, cached once in $RUNTIME_CACHE.
#
# The caller sets CACHE (~/.cache/cri-guard, CRI_GUARD_CACHE) and has sourced
# scripts/lib.sh (ts MSG, die MSG, apt_need PKG...: the Debian packages missing).
#
#   $CTRD_DIR   containerd, containerd-shim-runc-v2, ctr, containerd.service
#   $RUNC_DIR   runc
#
# The cache directory is the guest's from before the host harness used it too
# ($CACHE/vm): an existing build stays valid. make test builds it twice at once
# (vm.sh prebuild in the background, rt.sh up in the foreground): each build
# holds a lock, and the second finds the first's result.

CTRD=v2.3.7  # the newest 2.3.x (the LTS) on the module proxy
RUNC=v1.5.2
RUNTIME_CACHE=$CACHE/vm
CTRD_DIR=$RUNTIME_CACHE/containerd-$CTRD
RUNC_DIR=$RUNTIME_CACHE/runc-$RUNC

# modsrc MODULE VERSION DIR: a writable copy of a module's source.
modsrc() {
  local d
  d=$(cd /tmp && go mod download -json "$1@$2" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
  [ -n "$d" ] || die "go mod download $1@$2 failed"
  rm -rf "$3"; cp -a "$d" "$3"; chmod -R u+w "$3"
}

ctrd_built() { [ -x "$CTRD_DIR/containerd" ] && [ -x "$CTRD_DIR/containerd-shim-runc-v2" ] && [ -x "$CTRD_DIR/ctr" ]; }

# build_containerd: static, without cgo (no btrfs); the shim as its Makefile builds it.
build_containerd() {
  ctrd_built && return 0
  mkdir -p "$RUNTIME_CACHE/src"
  (flock 9
    ctrd_built && exit 0
    local o=$CTRD_DIR b=$RUNTIME_CACHE/src/containerd-$CTRD
    ts "containerd $CTRD: build"
    modsrc github.com/containerd/containerd/v2 "$CTRD" "$b"
    local ld="-s -w -X github.com/containerd/containerd/v2/version.Version=$CTRD -X github.com/containerd/containerd/v2/version.Revision=module"
    rm -rf "$o.tmp"; mkdir -p "$o.tmp"
    (cd "$b" && CGO_ENABLED=0 go build -trimpath -tags "urfave_cli_no_docs osusergo netgo static_build no_btrfs" -ldflags "$ld" -o "$o.tmp/" ./cmd/containerd ./cmd/ctr &&
      CGO_ENABLED=0 go build -trimpath -tags "urfave_cli_no_docs osusergo netgo static_build no_grpc" -ldflags "$ld" -o "$o.tmp/" ./cmd/containerd-shim-runc-v2 &&
      install -m 0644 containerd.service "$o.tmp/containerd.service") || die "containerd $CTRD: build failed"
    rm -rf "$o" "$b"; mv "$o.tmp" "$o"
    ts "containerd $CTRD: built"
  ) 9>"$RUNTIME_CACHE/containerd-$CTRD.lock"
}

# build_runc: static-pie with seccomp (libseccomp-dev's static library), no libpathrs.
build_runc() {
  [ -x "$RUNC_DIR/runc" ] && return 0
  apt_need libseccomp-dev gcc libc6-dev pkg-config
  mkdir -p "$RUNTIME_CACHE/src"
  (flock 9
    [ -x "$RUNC_DIR/runc" ] && exit 0
    local o=$RUNC_DIR b=$RUNTIME_CACHE/src/runc-$RUNC
    ts "runc $RUNC: build"
    modsrc github.com/opencontainers/runc "$RUNC" "$b"
    rm -rf "$o.tmp"; mkdir -p "$o.tmp"
    (cd "$b" && CGO_ENABLED=1 go build -trimpath -buildmode=pie -tags "seccomp urfave_cli_no_docs netgo osusergo" \
      -ldflags "-s -w -X main.version=${RUNC#v} -X main.gitCommit=module -linkmode external -extldflags -static-pie" -o "$o.tmp/runc" .) ||
      die "runc $RUNC: build failed"
    rm -rf "$o" "$b"; mv "$o.tmp" "$o"
    ts "runc $RUNC: built"
  ) 9>"$RUNTIME_CACHE/runc-$RUNC.lock"
}
