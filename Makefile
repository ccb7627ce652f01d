# GPULab. `make help` lists the targets. Run as root on a fresh Debian machine: the targets
# install what is missing (Debian packages, Go tools) and start what must run (Postgres) alone.

SHELL := /bin/bash
.DEFAULT_GOAL := help

TMP        := $(CURDIR)/.tmp
BIN        := $(CURDIR)/bin
PGPORT     ?= 55432
GO         ?= go
GOTESTFLAGS ?= -race -count=1 -timeout 15m
VERSION    ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS    := -X main.version=$(VERSION)
GOLANGCI_VERSION := v2.6.2
RUN_DIR    := $(TMP)/run
RUN_PORT   ?= 8443
BENCH_PGPORT ?= 55433
SCENARIOS  ?= all
# The record's line of text: LABEL=…, or GPULAB_BENCH_LABEL from the environment, which the
# bench reads when run without make.
LABEL      ?= $(GPULAB_BENCH_LABEL)
JUPYTERHUB ?= 1

# With no DATABASE_URL, a throwaway Postgres cluster lives in .tmp/pg (tests use fsync=off).
# `make bench` measures on a cluster of its own with fsync on, .tmp/pgbench (or BENCH_DATABASE_URL).
ifeq ($(DATABASE_URL),)
DB_URL = $(shell PG_EXTRA_OPTS="$(PG_EXTRA_OPTS)" scripts/pg.sh start $(TMP)/pg $(PGPORT))
else
DB_URL = $(DATABASE_URL)
endif

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: deps
deps: ## install what is missing (Debian packages) — run as root
	@scripts/deps.sh

.PHONY: generate
generate: ## regenerate generated code (go generate: the templ views, pinned as a Go tool)
	$(GO) generate ./...

HTMX_VERSION = $(shell cat static/HTMX_VERSION)
.PHONY: htmx
htmx: ## fetch htmx again from npm (htmx.org@static/HTMX_VERSION) and check its checksum; UPDATE=1 records a new one
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	  (cd "$$tmp" && npm pack --silent htmx.org@$(HTMX_VERSION) >/dev/null) && \
	  tar -xzf "$$tmp/htmx.org-$(HTMX_VERSION).tgz" -C "$$tmp" package/dist/htmx.min.js package/LICENSE && \
	  cp "$$tmp/package/dist/htmx.min.js" static/htmx.min.js && cp "$$tmp/package/LICENSE" static/htmx.LICENSE && \
	  cd static && if [ "$(UPDATE)" = 1 ]; then sha256sum htmx.min.js > htmx.min.js.sha256; fi && sha256sum -c htmx.min.js.sha256

AXE_DIR = internal/e2e/testdata/axe
.PHONY: axe
axe: ## fetch axe-core (the accessibility checker the portal tests run in Chromium) again from npm and check its checksum; UPDATE=1 records a new one
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	  (cd "$$tmp" && npm pack --silent axe-core@$$(cat $(CURDIR)/$(AXE_DIR)/VERSION) >/dev/null) && \
	  tar -xzf "$$tmp"/axe-core-*.tgz -C "$$tmp" package/axe.min.js package/LICENSE && \
	  cp "$$tmp/package/axe.min.js" "$$tmp/package/LICENSE" $(AXE_DIR)/ && \
	  cd $(AXE_DIR) && if [ "$(UPDATE)" = 1 ]; then sha256sum axe.min.js > axe.min.js.sha256; fi && sha256sum -c axe.min.js.sha256

.PHONY: build
build: ## build gpulab-master, gpulab-slave and gpulab-cli into bin/
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...

.PHONY: devidp
devidp: ## build the development OpenID provider (Dex, its own module in internal/devidp) into bin/
	cd internal/devidp && $(GO) build -o $(BIN)/gpulab-devidp .

.PHONY: lint
lint: ## gofmt, go vet and golangci-lint (installed into .tmp/bin on first use)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: the files above need formatting"; exit 1; }
	$(GO) vet ./...
	cd internal/devidp && $(GO) vet ./...
	@test -x $(TMP)/bin/golangci-lint || GOBIN=$(TMP)/bin $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION)
	$(TMP)/bin/golangci-lint run ./...

.PHONY: test
test: PG_EXTRA_OPTS = -c fsync=off
test: deps ## install what is missing, start Postgres and Docker, run every test (with -race)
	@scripts/dockerd.sh
	@scripts/notebook-image.sh
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: the files above need formatting"; exit 1; }
	$(GO) vet ./...
	DATABASE_URL="$(DB_URL)" $(GO) test $(GOTESTFLAGS) ./...

.PHONY: chaos
chaos: deps ## the fault suite at full size (internal/chaos; RUNS=2 repeats it); make test runs it small
	@scripts/dockerd.sh
	@mkdir -p $(TMP)/chaos
	@set -o pipefail; GPULAB_REQUIRE_SERVICES=1 GPULAB_CHAOS=full GPULAB_CHAOS_RUNS=$(RUNS) \
	  $(GO) test ./internal/chaos -run '^TestChaos$$' -count=1 -timeout 90m -v 2>&1 | tee $(TMP)/chaos/run.log | grep -E '^(=== RUN|--- |\s+---|ok|FAIL|PASS)|\||chaos size'
	@echo "figures: $(TMP)/chaos/results.md; logs: $(TMP)/test-output/TestChaos_*"

.PHONY: fuzz
fuzz: ## fuzz the job parser for a minute
	$(GO) test ./job -run '^$$' -fuzz FuzzParse -fuzztime 60s

.PHONY: bench
bench: PG_EXTRA_OPTS =
# The bench's cluster is set as a large site's Postgres would be (the README's "Benchmarks"):
# with the stock 128 MB of shared buffers and 1 GB of WAL between checkpoints, B8x's database
# outgrew its buffers and checkpointed every two minutes after 20 minutes of its soak. A cluster
# already running keeps what it was started with (`make clean` stops it); the record names both.
# track_wal_io_timing lets the soaks give the time the WAL's flushes to disk took each minute.
BENCH_PG_OPTS ?= -c shared_buffers=2GB -c max_wal_size=8GB -c track_wal_io_timing=on
bench: deps ## run the benchmarks (SCENARIOS=B1,B2,… or all; LABEL=text) on Postgres with fsync on; appends to bench/RESULTS.md
	@scripts/dockerd.sh
	@mkdir -p $(TMP)/bench
	@url="$(BENCH_DATABASE_URL)"; \
	  if [ -z "$$url" ]; then url=$$(PG_EXTRA_OPTS="$(BENCH_PG_OPTS)" scripts/pg.sh start $(TMP)/pgbench $(BENCH_PGPORT)) || exit 1; fi; \
	  set -o pipefail; \
	  DATABASE_URL="$$url" GPULAB_BENCH="$(SCENARIOS)" GPULAB_BENCH_LABEL="$(LABEL)" \
	  GPULAB_BENCH_COMMAND="make bench SCENARIOS=$(SCENARIOS)$(if $(LABEL), LABEL=…)$(if $(GPULAB_BENCH_SOAK), GPULAB_BENCH_SOAK=$(GPULAB_BENCH_SOAK))$(if $(GPULAB_BENCH_B8X_SLAVES), GPULAB_BENCH_B8X_SLAVES=$(GPULAB_BENCH_B8X_SLAVES))" \
	  $(GO) test ./bench -run '^TestScenarios$$' -count=1 -timeout 3h -v | tee $(TMP)/bench/run.log

.PHONY: run
run: deps build devidp ## start Postgres, Docker, a dev OpenID provider, a master on https://localhost:8443 and a slave with fake GPUs; prints a login
	@scripts/dockerd.sh
	@scripts/images.sh
	@if [ "$(JUPYTERHUB)" != 0 ]; then scripts/notebook-image.sh; fi
	@JUPYTERHUB=$(JUPYTERHUB) scripts/run.sh "$(DB_URL)" "$(RUN_DIR)" "$(RUN_PORT)" "$(BIN)"

.PHONY: env
env: ## print the exports of the running `make run` (database, folders, port): eval "$$(make -s env)"
	@cat $(RUN_DIR)/env.sh 2>/dev/null || { echo "make env: no $(RUN_DIR)/env.sh: start \`make run\` first" >&2; exit 1; }

.PHONY: notebook-image
notebook-image: ## build the local JupyterHub notebook image gpulab-notebook:latest from Debian's packages
	@scripts/notebook-image.sh

.PHONY: clean
clean: ## stop the throwaway Postgres clusters and remove bin/ and .tmp/
	-scripts/pg.sh stop $(TMP)/pg $(PGPORT)
	-scripts/pg.sh stop $(TMP)/pgbench $(BENCH_PGPORT)
	rm -rf $(BIN) $(TMP)
