# ferry: make build | test | test-stress | demo | bench | bench-quick | soak | setup | lint | image | layer
SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X github.com/ferry-fs/ferry/internal/cli.Version=$(VERSION) -X github.com/ferry-fs/ferry/internal/cli.Commit=$(COMMIT)
export CGO_ENABLED := 0
# disable_grpc_modules: cloud.google.com/go/storage without its gRPC client
# (ferry uses the JSON API): a 25 % smaller binary, and 9 MiB less resident
# (the gRPC, xDS and Envoy packages' init touched their pages at start).
export GOFLAGS := -buildvcs=false -tags=disable_grpc_modules
TOOLS ?= $(CURDIR)/.tools
export TOOLS
export PATH := $(TOOLS)/bin:$(PATH)

.PHONY: build test test-stress unit integration demo bench bench-quick soak setup lint clean image layer

build: bin/ferry

bin/ferry: $(shell find cmd internal pkg -name '*.go' 2>/dev/null) go.mod go.sum
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/ferry ./cmd/ferry

# Installs Debian packages and the test servers (MinIO, fake-gcs-server,
# Azurite, toxiproxy) into .tools; idempotent.
setup:
	./scripts/setup.sh

lint:
	@out=$$(gofmt -l cmd internal pkg bench); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# Unit + integration tests (real MinIO, fake-gcs-server, Azurite, real FUSE mounts).
test: setup lint build
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 25m ./...

# `make test` N times in a row (default 10) on a fresh clone of HEAD while
# two CPU burners run at normal priority; prints each run's duration and the
# pass count (scripts/test-stress.sh; TOOLS is passed on).
test-stress:
	./scripts/test-stress.sh $(N)

demo: setup build
	./scripts/demo.sh

bench: setup build
	./bench/run.sh full

bench-quick: setup build
	./bench/run.sh quick

soak: setup build
	FERRY_SOAK=1 CGO_ENABLED=1 $(GO) test -count=1 -timeout 60m -v -run Soak ./internal/e2e/ >.tools/soak-last.log 2>&1; rc=$$?; \
	  grep -E "^(--- |ok|FAIL)|FERRY_(MODEL|CRASH)_SEED|operations in" .tools/soak-last.log; \
	  echo "soak: $$(grep -c "iteration [0-9]*:" .tools/soak-last.log) crash iterations; full log .tools/soak-last.log"; exit $$rc

# The ferry image (FROM scratch, /usr/bin/ferry and /usr/bin/fusion) from
# bin/ferry, tagged ferry:$(VERSION) and ferry:latest, on $$DOCKER_HOST, else
# the default engine, else a private dockerd it starts under .tools/run
# (scripts/dockerd.sh stop stops it). IMAGE=name renames it.
image: build
	VERSION='$(VERSION)' ./scripts/image.sh

# bin/fusion-layer.tar.gz + bin/fusion-layer.json for Nextflow's
# fusion.containerConfigUrl (Wave). LAYER_URL=https://… is where the tarball
# will be downloaded from (upload it there).
layer: build
	./scripts/layer.sh

clean:
	rm -rf bin
