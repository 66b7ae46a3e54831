# cri-guard: build, unit tests, end-to-end tests against a private containerd.
#
#   make build   bin/cri-guard
#   make test    unit tests (-race), then scripts/rt.sh up (containerd 2.3.7 and
#                runc 1.5.2 from their Go modules, the guest's build) and
#                up-events (containerd 1.7, for the event stream test), the
#                host's integration tests (integration/host, integration/hostile,
#                pressure), then scripts/cluster.sh up (a one-node Kubernetes
#                through cri-guard on that containerd) and the TestCluster*
#                tests (integration/cluster), and the teardown of all three (always)
#   make run     scripts/rt.sh up, then cri-guard in the foreground on
#                $(RUN_SOCKET) in front of that containerd
#   make rt-up / rt-down   the harness alone
#   make controller-image   bin/cri-guard-controller.tar, the taint controller's
#                image (OCI archive, docker.io/library/cri-guard-controller:dev, the
#                name contrib/controller/ uses; CONTROLLER_IMAGE=... for another):
#                ctr -n k8s.io images import it, or push it with
#                CONTROLLER_PUSH=host:port (plain HTTP)
#   make cluster-up / cluster-down / cluster-test   the one-node cluster alone
#   make vm-up / vm-down / guest-test   the UML guest (cgroup v2, systemd, containerd
#                2.x, the kubelet, cri-guard from its .deb) alone; make test runs
#                its tests last
#   make deb     the Debian package, bin/cri-guard_<version>_<arch>.deb
#   make tools-test   vet and test -race of tools/cri-guard-bench and
#                tools/mkimages (modules of their own); make test runs it
#   make scripts-test   bash -n of scripts/*.sh and scripts/lib_test.sh (the
#                helpers of scripts/lib.sh, without root or the harness; a few
#                seconds); make test runs it
#   make monitoring-test   contrib/monitoring: promtool check rules and test
#                rules (promtool from Debian's prometheus package, unpacked by
#                scripts/promtool.sh, not installed), and the Go test that each
#                series named there is one cri-guard exports; make test runs it.
#                alerts_scrape_test.yaml (the rules over recorded scrapes of a
#                real pressure episode) is generated: make monitoring-scrape
#   make compat  the compatibility matrix (not part of make test): each kubelet of
#                $(COMPAT_KUBELETS) x each containerd of $(COMPAT_CONTAINERDS),
#                critest and a standalone kubelet's admission and eviction through
#                cri-guard; writes docs/compatibility.md. COMPAT_CELLS="k1.37.2-c2.4.2 ..."
#                runs only those cells (scripts/compat.sh cells lists them)

SHELL := /usr/bin/env bash
GO ?= go
CRI_GUARD_RT ?= /tmp/cri-guard-rt
RUN_SOCKET ?= /run/cri-guard/cri-guard.sock
INTEGRATION_TIMEOUT ?= 40m
# The host stage's packages (make test, make integration): the tests on the
# rt.sh containerd, the floods, and pressure's tests on this kernel. The
# cluster's (integration/cluster) and the guest's (integration/guest) run in
# stages of their own; integration/harness holds what they share.
HOST_TEST_PKGS ?= ./integration/host/ ./integration/hostile/ ./internal/pressure/
CRI_GUARD_CLUSTER_DIR ?= /tmp/cri-guard-cluster
CLUSTER_TIMEOUT ?= 20m
MULTINODE_TIMEOUT ?= 30m
CRI_GUARD_VM_DIR ?= /tmp/cri-guard-vm
GUEST_TIMEOUT ?= 40m
export CRI_GUARD_RT

.PHONY: compat controller-image monitoring-test monitoring-scrape monitoring-rule deb vm-up vm-down guest-test build test unit kubeletdiff slowfs tools-test scripts-test integration run rt-up rt-down cluster-up cluster-down cluster-test multinode-test clean install verify-units
DESTDIR ?=

# How cri-guard is built for use (make build, run, install; the benchmark):
# a static binary (no cgo: it only talks over unix sockets and 127.0.0.1),
# without grpc's golang.org/x/net/trace debug pages (grpcnotrace: they are
# never enabled), without the symbol table. Each cuts what the kernel maps in
# at start-up: idle RSS 19.0 -> 15.0 MiB measured on a 2-core CI VM.
BUILD_TAGS ?= grpcnotrace
BUILD_FLAGS ?= -tags $(BUILD_TAGS) -trimpath -ldflags '-s -w'

build:
	CGO_ENABLED=0 $(GO) build $(BUILD_FLAGS) -o bin/cri-guard ./cmd/cri-guard

# The taint controller's image: its static binary alone (tools/mkimages
# -controller), no base image to pull.
CONTROLLER_IMAGE ?= docker.io/library/cri-guard-controller:dev
CONTROLLER_PUSH ?=
controller-image:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o bin/cri-guard-controller ./cmd/cri-guard-controller
	$(GO) -C tools/mkimages run . -out $(CURDIR)/bin -controller $(CURDIR)/bin/cri-guard-controller -controller-name $(CONTROLLER_IMAGE) $(if $(CONTROLLER_PUSH),-push $(CONTROLLER_PUSH))

# The Debian package (scripts/mkdeb.sh: binary, unit, conffile, the kubelet
# drop-in as an opt-in file, maintainer scripts) into $(DEB_DIR).
DEB_VERSION ?= 0.1.$(shell git rev-list --count HEAD 2>/dev/null || echo 0)$(DEB_VERSION_SUFFIX)
DEB_DIR ?= bin
deb:
	CGO_ENABLED=0 $(GO) build -tags $(BUILD_TAGS) -trimpath -ldflags '-s -w -X main.version=$(DEB_VERSION)' -o bin/deb/cri-guard ./cmd/cri-guard
	scripts/mkdeb.sh bin/deb/cri-guard $(DEB_VERSION) $(DEB_DIR)

unit:
	$(GO) test -race ./...

# The alerts and the dashboard of contrib/monitoring. promtool comes from
# scripts/promtool.sh (cached under ~/.cache/cri-guard); the Go test also
# runs in the unit tests.
monitoring-test:
	p=$$(scripts/promtool.sh) && "$$p" check rules contrib/monitoring/alerts.yaml && \
	  cd contrib/monitoring && "$$p" test rules alerts_test.yaml $(if $(wildcard contrib/monitoring/alerts_scrape_test.yaml),alerts_scrape_test.yaml)
	$(GO) test -count=1 -run 'TestMonitoring' ./cmd/cri-guard/
	PROMTOOL=$$(scripts/promtool.sh) $(GO) test -count=1 ./contrib/monitoring/scrapegen/

# The alert tests over real scrapes (contrib/monitoring/scrapegen):
# alerts_scrape_test.yaml again from the recordings in
# contrib/monitoring/testdata/scrape-*/, after copying them (trimmed to the
# series the rules read) from SCRAPES, a CRI_GUARD_SCRAPE_DIR the cluster
# tests recorded into:
#   CRI_GUARD_SCRAPE_DIR=/tmp/cri-guard-scrapes make cluster-test
#   make monitoring-scrape SCRAPES=/tmp/cri-guard-scrapes && make monitoring-test
# prometheusrule.yaml, alerts.yaml as a PrometheusRule, again (the Go test
# of monitoring-test fails while it differs).
monitoring-rule:
	CRI_GUARD_UPDATE_MONITORING=1 $(GO) test -count=1 -run 'TestMonitoringPrometheusRule$$' ./cmd/cri-guard/

SCRAPES ?=
monitoring-scrape:
	$(GO) run ./contrib/monitoring/scrapegen $(if $(SCRAPES),-import $(SCRAPES))

# The differential test against the kubelet's own eviction manager (a module
# of its own: the product's go.mod does not grow the kubelet's dependencies).
# By hand: cd tools/kubeletdiff && go run . -seed N -count M
kubeletdiff:
	cd tools/kubeletdiff && $(GO) test -count=1 ./...

# tools/slowfs, the FUSE loopback whose fsync is slow (a module of its own
# too: the product does not import go-fuse). Its test mounts it in a temp
# dir (skipped without /dev/fuse or root), under a second. Build and use:
# cd tools/slowfs && go build -o /tmp/slowfs . && /tmp/slowfs -delay 1s BACKING MNT
slowfs:
	cd tools/slowfs && $(GO) vet ./... && $(GO) test -count=1 ./...

# tools/cri-guard-bench (the benchmarks: race, idle, maxprocs, apicost, fleet)
# and tools/mkimages (the harness's test images) are modules of their own:
# the typed clientset's fakes, cri-api's fakes and go-containerregistry stay
# out of the product's go.mod, and `go test ./...` at the root passes over
# them. This stage vets and tests them (-race), as the unit stage does the
# product's packages. By hand:
# cd tools/cri-guard-bench && go build -o ../../bin/cri-guard-bench .
TOOLS_TEST_MODULES ?= tools/cri-guard-bench tools/mkimages
tools-test:
	@rc=0; for m in $(TOOLS_TEST_MODULES); do \
	  echo "== $$m"; \
	  $(GO) -C $$m vet ./... && $(GO) -C $$m test -race -count=1 ./... || rc=1; \
	done; exit $$rc

# The scripts' syntax, and the shared helpers of scripts/lib.sh by
# scripts/lib_test.sh: what the harness scripts do with them only the stages
# below exercise.
scripts-test:
	@rc=0; for f in scripts/*.sh; do bash -n "$$f" || rc=1; done; \
	scripts/lib_test.sh || rc=1; exit $$rc

# Runs every stage even when one fails, always tears the harness down, and
# exits non-zero if anything failed.
test:
	@rc=0; \
	trap 'CRI_GUARD_CLUSTER=$(CRI_GUARD_CLUSTER_DIR) scripts/cluster.sh down || rc=1; scripts/rt.sh down-events || rc=1; scripts/rt.sh down || rc=1; CRI_GUARD_VM=$(CRI_GUARD_VM_DIR) scripts/vm.sh down || rc=1' EXIT; \
	mkdir -p bin; CRI_GUARD_VM=$(CRI_GUARD_VM_DIR) nice -n 10 scripts/vm.sh prebuild >bin/vm-prebuild.log 2>&1 & vmb=$$!; \
	$(GO) test -race ./... || rc=1; \
	$(MAKE) --no-print-directory monitoring-test || rc=1; \
	$(MAKE) --no-print-directory kubeletdiff || rc=1; \
	$(MAKE) --no-print-directory slowfs || rc=1; \
	$(MAKE) --no-print-directory tools-test || rc=1; \
	$(MAKE) --no-print-directory scripts-test || rc=1; \
	$(MAKE) --no-print-directory build || rc=1; \
	if scripts/rt.sh up; then \
	  if scripts/rt.sh up-events; then export CRI_GUARD_RT_EVENTS=$(CRI_GUARD_RT)-events/containerd.sock; \
	  else echo "make test: scripts/rt.sh up-events failed" >&2; rc=1; fi; \
	  $(GO) test -p 1 -tags integration -race -count=1 -timeout $(INTEGRATION_TIMEOUT) -v $(HOST_TEST_PKGS) || rc=1; \
	  if CRI_GUARD_CLUSTER=$(CRI_GUARD_CLUSTER_DIR) scripts/cluster.sh up; then \
	    CRI_GUARD_CLUSTER=$(CRI_GUARD_CLUSTER_DIR) $(GO) test -tags integration -count=1 -timeout $(CLUSTER_TIMEOUT) -v ./integration/cluster/ || rc=1; \
	  else \
	    echo "make test: scripts/cluster.sh up failed" >&2; rc=1; \
	  fi; \
	  CRI_GUARD_CLUSTER=$(CRI_GUARD_CLUSTER_DIR) scripts/cluster.sh down || rc=1; \
	  if CRI_GUARD_CLUSTER_NODES=3 CRI_GUARD_CLUSTER=$(CRI_GUARD_CLUSTER_DIR) scripts/cluster.sh up; then \
	    CRI_GUARD_CLUSTER=$(CRI_GUARD_CLUSTER_DIR) $(GO) test -tags integration -count=1 -timeout $(MULTINODE_TIMEOUT) -v -run '^TestClusterMultiNode' ./integration/cluster/ || rc=1; \
	  else \
	    echo "make test: CRI_GUARD_CLUSTER_NODES=3 scripts/cluster.sh up failed" >&2; rc=1; \
	  fi; \
	  CRI_GUARD_CLUSTER=$(CRI_GUARD_CLUSTER_DIR) scripts/cluster.sh down || rc=1; \
	else \
	  echo "make test: scripts/rt.sh up failed" >&2; rc=1; \
	fi; \
	scripts/rt.sh down-events || rc=1; scripts/rt.sh down || rc=1; \
	wait $$vmb || { echo "make test: scripts/vm.sh prebuild failed:" >&2; tail -40 bin/vm-prebuild.log >&2; rc=1; }; \
	if CRI_GUARD_VM=$(CRI_GUARD_VM_DIR) scripts/vm.sh up; then \
	  CRI_GUARD_VM=$(CRI_GUARD_VM_DIR) $(GO) test -tags integration -count=1 -timeout $(GUEST_TIMEOUT) -v ./integration/guest/ || rc=1; \
	else \
	  echo "make test: scripts/vm.sh up failed" >&2; rc=1; \
	fi; \
	CRI_GUARD_VM=$(CRI_GUARD_VM_DIR) scripts/vm.sh down || rc=1; trap - EXIT; \
	exit $$rc

integration:
	$(GO) test -p 1 -tags integration -race -count=1 -timeout $(INTEGRATION_TIMEOUT) -v $(HOST_TEST_PKGS)

rt-up:
	scripts/rt.sh up

rt-down:
	scripts/rt.sh down

cluster-up:
	CRI_GUARD_CLUSTER=$(CRI_GUARD_CLUSTER_DIR) scripts/cluster.sh up

cluster-down:
	CRI_GUARD_CLUSTER=$(CRI_GUARD_CLUSTER_DIR) scripts/cluster.sh down

vm-up:
	scripts/vm.sh up

vm-down:
	scripts/vm.sh down

guest-test:
	CRI_GUARD_VM=$(CRI_GUARD_VM_DIR) $(GO) test -tags integration -count=1 -timeout $(GUEST_TIMEOUT) -v ./integration/guest/

# The three-node tests: CRI_GUARD_CLUSTER_NODES=3 scripts/cluster.sh up first.
multinode-test:
	CRI_GUARD_CLUSTER=$(CRI_GUARD_CLUSTER_DIR) $(GO) test -tags integration -count=1 -timeout $(MULTINODE_TIMEOUT) -v -run '^TestClusterMultiNode' ./integration/cluster/

cluster-test:
	CRI_GUARD_CLUSTER=$(CRI_GUARD_CLUSTER_DIR) $(GO) test -tags integration -count=1 -timeout $(CLUSTER_TIMEOUT) -v ./integration/cluster/

# The newest patch release of each minor on the module proxy.
COMPAT_KUBELETS ?= v1.35.4 v1.36.3 v1.37.2
COMPAT_CONTAINERDS ?= v2.2.9 v2.3.7 v2.4.2
COMPAT_CELLS ?=
compat:
	COMPAT_KUBELETS="$(COMPAT_KUBELETS)" COMPAT_CONTAINERDS="$(COMPAT_CONTAINERDS)" nice -n 10 scripts/compat.sh run $(COMPAT_CELLS)

run: build rt-up
	@mkdir -p $(dir $(RUN_SOCKET))
	@echo "cri-guard on $(RUN_SOCKET) in front of $(CRI_GUARD_RT)/containerd.sock; in another shell:"
	@echo "  $(CRI_GUARD_RT)/bin/crictl --runtime-endpoint unix://$(RUN_SOCKET) --image-endpoint unix://$(RUN_SOCKET) ps"
	@echo "(stop with Ctrl-C; then 'make rt-down')"
	bin/cri-guard --listen $(RUN_SOCKET) --runtime-endpoint $(CRI_GUARD_RT)/containerd.sock

clean:
	rm -rf bin

# install: binary, systemd unit, and the example config (an existing config is kept).
install: build
	install -D -m 0755 bin/cri-guard $(DESTDIR)/usr/local/bin/cri-guard
	install -D -m 0644 contrib/systemd/cri-guard.service $(DESTDIR)/etc/systemd/system/cri-guard.service
	@if [ -e $(DESTDIR)/etc/cri-guard/config.yaml ]; then \
	  echo "keeping $(DESTDIR)/etc/cri-guard/config.yaml"; \
	else \
	  install -D -m 0644 contrib/config.yaml $(DESTDIR)/etc/cri-guard/config.yaml; \
	fi
	@echo "next: systemctl daemon-reload && systemctl enable --now cri-guard;"
	@echo "then install contrib/systemd/kubelet.service.d/10-cri-guard.conf and restart the kubelet"

verify-units: build
	@d=$$(mktemp -d); trap 'rm -rf "$$d"' EXIT; \
	sed 's|/usr/local/bin/cri-guard|$(CURDIR)/bin/cri-guard|' contrib/systemd/cri-guard.service > "$$d/cri-guard.service"; \
	out=$$(systemd-analyze verify --man=no "$$d/cri-guard.service" 2>&1); rc=$$?; \
	if [ -n "$$out" ] || [ $$rc -ne 0 ]; then echo "$$out"; exit 1; fi; echo "cri-guard.service: ok"
