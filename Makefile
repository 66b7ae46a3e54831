# cri-guard: build, unit tests, end-to-end tests against a private containerd.
#
#   make build   bin/cri-guard
#   make test    unit tests (-race), then scripts/rt.sh up, the integration
#                tests against that containerd, and scripts/rt.sh down (always)
#   make run     scripts/rt.sh up, then cri-guard in the foreground on
#                $(RUN_SOCKET) in front of that containerd
#   make rt-up / rt-down   the harness alone

SHELL := /usr/bin/env bash
GO ?= go
CRI_GUARD_RT ?= /tmp/cri-guard-rt
RUN_SOCKET ?= /run/cri-guard/cri-guard.sock
INTEGRATION_TIMEOUT ?= 40m
export CRI_GUARD_RT

.PHONY: build test unit integration run rt-up rt-down clean

build:
	$(GO) build -o bin/cri-guard ./cmd/cri-guard

unit:
	$(GO) test -race ./...

# Runs every stage even when one fails, always tears the harness down, and
# exits non-zero if anything failed.
test:
	@rc=0; \
	trap 'scripts/rt.sh down || rc=1' EXIT; \
	$(GO) test -race ./... || rc=1; \
	if scripts/rt.sh up; then \
	  $(GO) test -tags integration -race -count=1 -timeout $(INTEGRATION_TIMEOUT) -v ./integration/... || rc=1; \
	else \
	  echo "make test: scripts/rt.sh up failed" >&2; rc=1; \
	fi; \
	scripts/rt.sh down || rc=1; trap - EXIT; \
	exit $$rc

integration:
	$(GO) test -tags integration -race -count=1 -timeout $(INTEGRATION_TIMEOUT) -v ./integration/...

rt-up:
	scripts/rt.sh up

rt-down:
	scripts/rt.sh down

run: build rt-up
	@mkdir -p $(dir $(RUN_SOCKET))
	@echo "cri-guard on $(RUN_SOCKET) in front of $(CRI_GUARD_RT)/containerd.sock; in another shell:"
	@echo "  $(CRI_GUARD_RT)/bin/crictl --runtime-endpoint unix://$(RUN_SOCKET) --image-endpoint unix://$(RUN_SOCKET) ps"
	@echo "(stop with Ctrl-C; then 'make rt-down')"
	bin/cri-guard --listen $(RUN_SOCKET) --runtime-endpoint $(CRI_GUARD_RT)/containerd.sock

clean:
	rm -rf bin
