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
LDFLAGS   := -X main.version=$(VERSION)

.PHONY: all build run test test-deps unit lint fmt bench fuzz testservers clean

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/meshfed

run: build
	./$(BIN) run --config $(CONFIG)

# test-deps installs what the tests start for real: Debian's ZooKeeper, and
# the servers tools/testservers builds (cached under $(MESHFED_CACHE)).
test-deps:
	@./tools/install-test-deps.sh

test: test-deps lint
	MESHFED_REQUIRE_SERVERS=1 $(GO) test -timeout 40m -count=1 $(PKGS)

# unit runs the fast tests only; tests that need real servers skip.
unit:
	$(GO) test -short $(PKGS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) tool staticcheck $(PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')

# fuzz runs every Fuzz* target (found with go test -list) for FUZZTIME each;
# their seed corpora (testdata/fuzz/FuzzXxx) already run in `make test`.
FUZZTIME ?= 30s
fuzz:
	FUZZTIME=$(FUZZTIME) GO=$(GO) ./tools/fuzz.sh

bench: build test-deps
	$(GO) run ./bench/cmd/benchreport -out BENCHMARKS.md

testservers:
	@./tools/testservers/build.sh all

clean:
	rm -rf bin
