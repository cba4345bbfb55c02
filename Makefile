# meshfed — `make run` serves the default clusters.yaml with nothing external;
# `make test` installs what the tests need and runs them all.
SHELL := /bin/bash
export GOTOOLCHAIN := local
GO        ?= go
BIN       := bin/meshfed
CONFIG    ?= clusters.yaml
PKGS      := ./...
# Test servers built by tools/testservers are cached here, outside the clone,
# so a second `make test` (and CI on the same machine) does not rebuild them.
export MESHFED_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/meshfed
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS   := -X main.version=$(VERSION) -X main.revision=$(REVISION)
# Release builds: static, stripped, no local paths, commit time as mtime.
DIST      := dist
RELEASE_LDFLAGS := -s -w $(LDFLAGS)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
# Versions without the leading v (goreleaser's {{.Version}}; Debian needs a digit first).
vless       := $(patsubst v%,%,$(VERSION))
PKG_VERSION := $(if $(filter 0% 1% 2% 3% 4% 5% 6% 7% 8% 9%,$(vless)),$(vless),0.0.0~$(vless))
IMAGE     ?= ghcr.io/meshfed/meshfed:$(VERSION)
# tools/dist is its own module (go-containerregistry, nfpm).
DISTTOOL  := $(GO) -C tools/dist run ./cmd/meshfed-dist
ARCHES    := amd64 arm64

.PHONY: all help build run test test-deps unit lint fmt bench soak chaos fuzz testservers clean manifests image deb release

all: build ## build bin/meshfed (the default)

# help lists the targets documented by a "## " comment on their rule line.
help: ## list the targets with a one-line description
	@awk -F ':.*## ' '/^[a-zA-Z_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build bin/meshfed
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/meshfed

run: build ## build and start meshfed on CONFIG (default clusters.yaml; nothing external)
	./$(BIN) run --config $(CONFIG)

# test-deps installs what the tests start for real: Debian's ZooKeeper, and
# the servers tools/testservers builds (cached under $(MESHFED_CACHE)).
test-deps: ## install what the tests start for real (Debian packages, test servers, cached)
	@./tools/install-test-deps.sh

test: test-deps lint ## install the test dependencies, lint, and run every test
	MESHFED_REQUIRE_SERVERS=1 $(GO) test -timeout 40m -count=1 $(PKGS)
	MESHFED_REQUIRE_SERVERS=1 $(GO) -C tools/dist test -count=1 ./...
	MESHFED_REQUIRE_SERVERS=1 $(GO) -C deploy/chart test -count=1 ./...

# unit runs the fast tests only; tests that need real servers skip.
unit: ## run the fast tests only (go test -short); tests needing real servers skip
	$(GO) test -short $(PKGS)

lint: ## gofmt, go mod tidy, go vet, staticcheck, import rules, docs' tables of contents and links, rendered manifests
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@$(GO) mod tidy -diff >/dev/null || { echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1; }
	@$(GO) -C deploy/chart mod tidy -diff >/dev/null || { echo "deploy/chart/go.mod is not tidy: run go -C deploy/chart mod tidy"; exit 1; }
	$(GO) vet $(PKGS)
	$(GO) tool staticcheck $(PKGS)
	$(GO) -C tools/dist vet ./...
	$(GO) -C deploy/chart vet ./...
	@./tools/check-imports.sh
	@./tools/check-make-help.sh
	@./tools/check-docs.sh
	@tmp=$$(mktemp); trap 'rm -f $$tmp' EXIT; $(GO) -C deploy/chart run ./cmd/render -o $$tmp && \
	  diff -u deploy/kubernetes/meshfed.yaml $$tmp || { echo "deploy/kubernetes/meshfed.yaml differs from deploy/helm/meshfed: run make manifests"; exit 1; }

# manifests renders the Helm chart with its default values into the plain
# manifest (make lint fails when they differ).
manifests: ## render the Helm chart into deploy/kubernetes/meshfed.yaml
	$(GO) -C deploy/chart run ./cmd/render -o $(CURDIR)/deploy/kubernetes/meshfed.yaml

$(DIST)/build/linux_%/meshfed: FORCE
	CGO_ENABLED=0 GOOS=linux GOARCH=$* $(GO) build -trimpath -ldflags '$(RELEASE_LDFLAGS)' -o $@ ./cmd/meshfed

# image builds the OCI image without a daemon: $(DIST)/meshfed-image_<v>_linux_amd64.tar
# (docker/podman load) and the OCI layout $(DIST)/oci (skopeo, crane).
image: $(DIST)/build/linux_amd64/meshfed ## build the OCI image (tar and OCI layout in dist/), no daemon needed
	$(DISTTOOL) image -binary $(CURDIR)/$< -arch amd64 -version $(VERSION) -revision $(REVISION) \
	  -created $(SOURCE_DATE_EPOCH) -ref $(IMAGE) \
	  -tar $(CURDIR)/$(DIST)/meshfed-image_$(PKG_VERSION)_linux_amd64.tar -layout $(CURDIR)/$(DIST)/oci

# deb builds $(DIST)/meshfed_<v>_<arch>.deb (binary, systemd unit, /etc/meshfed) with nfpm.
deb: $(addprefix $(DIST)/build/linux_,$(addsuffix /meshfed,$(ARCHES))) ## build the Debian packages (amd64, arm64) into dist/
	@for a in $(ARCHES); do \
	  $(DISTTOOL) deb -root $(CURDIR) -binary $(CURDIR)/$(DIST)/build/linux_$$a/meshfed -arch $$a \
	    -version $(PKG_VERSION) -o $(CURDIR)/$(DIST)/meshfed_$(PKG_VERSION)_$$a.deb || exit 1; done

# release cross-builds linux/amd64 and linux/arm64 archives (goreleaser's
# layout: meshfed_<version>_linux_<arch>.tar.gz) and Debian packages, with
# SHA-256 checksums, into $(DIST). Nothing is published.
release: deb ## cross-build release archives, Debian packages and checksums into dist/
	@set -e; for a in $(ARCHES); do \
	  d=$(DIST)/build/meshfed_$(PKG_VERSION)_linux_$$a; rm -rf $$d; mkdir -p $$d; \
	  cp $(DIST)/build/linux_$$a/meshfed README.md CHANGELOG.md $$d/; cp -r deploy/systemd $$d/systemd; \
	  tar --sort=name --mtime=@$(SOURCE_DATE_EPOCH) --owner=0 --group=0 --numeric-owner \
	    -C $(DIST)/build -cf - meshfed_$(PKG_VERSION)_linux_$$a | gzip -n > $(DIST)/meshfed_$(PKG_VERSION)_linux_$$a.tar.gz; \
	done
	cd $(DIST) && sha256sum meshfed_$(PKG_VERSION)_*.tar.gz meshfed_$(PKG_VERSION)_*.deb > meshfed_$(PKG_VERSION)_checksums.txt
	@cat $(DIST)/meshfed_$(PKG_VERSION)_checksums.txt

FORCE:

fmt: ## gofmt every Go file
	gofmt -w $$(git ls-files '*.go')

# fuzz runs every Fuzz* target (found with go test -list) for FUZZTIME each;
# their seed corpora (testdata/fuzz/FuzzXxx) already run in `make test`.
FUZZTIME ?= 30s
fuzz: ## run every Fuzz* target for FUZZTIME (default 30s) each
	FUZZTIME=$(FUZZTIME) GO=$(GO) ./tools/fuzz.sh

# bench rewrites BENCHMARKS.md with every scenario, the soak (SOAK of
# churn) included; BENCH_SHORT=1 leaves the soak out.
SOAK      ?= 10m
SOAK_OUT  ?= bin/soak.md
bench: build test-deps ## run the benchmarks and rewrite BENCHMARKS.md (BENCH_SHORT=1: without the soak)
	$(GO) run ./bench/cmd/benchreport -out BENCHMARKS.md -soak $(if $(BENCH_SHORT),0,$(SOAK))

# soak runs only the soak scenario for SOAK (make soak SOAK=1m: a smoke)
# and writes its rows to SOAK_OUT.
soak: build ## run only the soak for SOAK (default 10m) into SOAK_OUT
	$(GO) run ./bench/cmd/benchreport -only SOAK -soak $(SOAK) -out $(SOAK_OUT)

# chaos runs test/chaos (every registry server at once under churn, a
# seeded fault schedule, two replicas, a checker) for CHAOS_DURATION and
# rewrites CHAOS.md; CHAOS_SEED=N replays a schedule. `make test` runs its
# 3-minute slice.
CHAOS_DURATION ?= 30m
chaos: test-deps ## run the chaos test for CHAOS_DURATION (default 30m; CHAOS_SEED=N replays) and rewrite CHAOS.md
	CHAOS_DURATION=$(CHAOS_DURATION) CHAOS_SEED=$(CHAOS_SEED) CHAOS_REPORT=$(CURDIR)/CHAOS.md MESHFED_REQUIRE_SERVERS=1 \
	  $(GO) test -count=1 -timeout 24h -run '^TestChaos$$' -v ./test/chaos

testservers: ## build the test servers of tools/testservers
	@./tools/testservers/build.sh all

clean: ## remove bin/ and dist/
	rm -rf bin $(DIST)
