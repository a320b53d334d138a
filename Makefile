# oncepay — the two commands a newcomer needs are `make run` and `make test`.
SHELL := /bin/bash
GO    ?= go
PKGS  := ./...

.PHONY: run test test-galera build migrate lint fmt-check tidy-check vet staticcheck kit-module-check compose-up bench bench-scale bench-soak

## run: build and start the server on :8080 with every dependency embedded.
run: build
	./bin/oncepay

## test: the whole suite: gofmt check, go vet, staticcheck, go test -race; then the
## idempotency kit's own suite (idempotent/, a module of its own, which go test ./... does not
## enter) on MariaDB and once more on each other dialect (ONCEPAY_TEST_KIT_DIALECT), and the
## examples module, which imports the kit as a stranger would, and the example webhook
## receiver (a module of its own that imports nothing of oncepay).
KIT := idempotent
test: lint
	$(GO) test -race -count=1 -timeout 12m $(PKGS)
	cd $(KIT) && $(GO) test -race -count=1 -timeout 12m ./...
	cd $(KIT) && ONCEPAY_TEST_KIT_DIALECT=sqlite $(GO) test -race -count=1 -timeout 5m ./...
	@if [ -n "$$ONCEPAY_TEST_POSTGRES_DSN" ] || [ "$$CI" = true ]; then \
		echo "cd $(KIT) && ONCEPAY_TEST_KIT_DIALECT=postgres $(GO) test -race -count=1 -timeout 5m ./..."; \
		cd $(KIT) && ONCEPAY_TEST_KIT_DIALECT=postgres $(GO) test -race -count=1 -timeout 5m ./...; \
	fi
	cd examples && $(GO) test -race -count=1 -timeout 5m ./...
	cd examples/webhook-receiver && $(GO) test -race -count=1 -timeout 5m ./...

## test-galera: the tests that need a real MariaDB Galera cluster (issue 21): they start three
## private nodes (galera-4; MySQL ports 4401–4403, replication 4411–4413, IST 4421–4423, SST
## 4431–4433, ONCEPAY_TEST_GALERA_PORT moves them) and three instances, one on each. Not in
## `make test`, which skips them: see docs/galera.md.
test-galera:
	ONCEPAY_TEST_GALERA=1 $(GO) test -race -count=1 -timeout 10m -run 'Galera|FailoverThatForgets' -v ./internal/app/

## build: compile the binaries into ./bin.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/oncepay ./cmd/oncepay

## migrate: apply migrations/ to the configured database and exit.
migrate:
	$(GO) run ./cmd/oncepay migrate

## lint: gofmt, go mod tidy, go vet and staticcheck (the kit's module included), and the
## kit's module graph holding no other module of oncepay (kit-module-check).
lint: fmt-check tidy-check vet staticcheck kit-module-check

tidy-check:
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1; }
	@cd $(KIT) && $(GO) mod tidy -diff || { echo "$(KIT)/go.mod is not tidy: run go mod tidy in $(KIT)"; exit 1; }
	@cd examples && $(GO) mod tidy -diff || { echo "examples/go.mod is not tidy: run go mod tidy in examples"; exit 1; }
	@cd examples/webhook-receiver && $(GO) mod tidy -diff || { echo "examples/webhook-receiver/go.mod is not tidy: run go mod tidy there"; exit 1; }

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt wants to rewrite:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)
	cd $(KIT) && $(GO) vet ./...
	cd examples && $(GO) vet ./...
	cd examples/webhook-receiver && $(GO) vet ./...

# The kit's module does not require staticcheck (a tool line would land in every adopter's
# module graph): it runs the root module's build of it.
staticcheck:
	$(GO) tool staticcheck $(PKGS)
	sc=$$($(GO) tool -n staticcheck) && cd $(KIT) && $$sc ./...

## kit-module-check: the idempotency kit is a module of its own (go get
## github.com/oncepay/oncepay/idempotent brings gorm, go-redis, redsync and Prometheus's
## client, not the service's dependencies): its module graph must hold no other module of
## oncepay, and its go.mod must replace nothing. The kit's TestModuleRequiresNothingOfOncepay
## says the same in go test.
kit-module-check:
	@cd $(KIT) && mods=$$($(GO) list -m -f '{{.Path}}' all) && \
	if echo "$$mods" | tail -n +2 | grep '^github.com/oncepay/'; then \
		echo "$(KIT)/go.mod requires the modules above: the kit must not depend on oncepay"; exit 1; fi
	@cd $(KIT) && if [ -n "$$($(GO) mod edit -json | grep '"Replace": \[')" ]; then \
		echo "$(KIT)/go.mod has a replace directive, which binds no adopter"; exit 1; fi

## bench: the guard side by side with a bare handler and gofiber, 3 runs and their medians
## (set ONCEPAY_TEST_MYSQL_DSN and ONCEPAY_TEST_REDIS_ADDR; see bench/README.md).
bench:
	cd bench && $(GO) run . -runs 3

## bench-scale: new keys against 10 M dedup records, and 1 M of them purged under traffic
## (MariaDB: the fill uses its SEQUENCE engine; about 10 minutes).
bench-scale:
	cd bench && $(GO) run . -scale 10000000 -purge 1000000 -d 10s

## bench-soak: one oncepay process under 5 minutes of mixed load (orders, replays, payments,
## Kafka), its resident memory sampled: it must stay flat after the warm-up.
bench-soak:
	cd bench && $(GO) run . -soak 5m

## compose-up: MySQL 8, Redis 7, Kafka (KRaft) and the app, wired by env vars.
compose-up:
	docker compose up --build

# fork:drop ---- this repository's own: `make fork` and the training kit (tools/: the drill, the
# ---- chaos run and the lab). `make fork` deletes this block with tools/ from the service it makes.
.PHONY: fork drill chaos chaos-short tools

## fork: make a service of your own from this repository, in place (commit first) or, with
## DIR=…, in a copy: `make fork MODULE=example.com/acme NAME=acme`. It renames the module path
## (every module: the root, idempotent/, examples/, bench/) and the product's name (settings
## ACME_*, metrics acme_*, bin/acme, the docs), and removes the training kit (scripts/fork.sh
## says what and why; CI runs it on a copy, .ci/fork).
fork:
	@[ -n "$(MODULE)" ] && [ -n "$(NAME)" ] || { echo "usage: make fork MODULE=example.com/acme NAME=acme [DIR=path of a copy]"; exit 2; }
	./scripts/fork.sh "$(MODULE)" "$(NAME)" $(DIR)

## tools: the training kit's binaries: bin/oncepay-lab (oncepay with /lab/), bin/drill, bin/chaos,
## and bin/oncepay. One go build for all four: it loads and hashes the package graph once and
## links the binaries side by side (four builds one after another took about four times as long
## when nothing had changed).
tools:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/ ./cmd/oncepay ./tools/cmd/oncepay-lab ./tools/cmd/drill ./tools/cmd/chaos

## drill: start an embedded oncepay with the lab on (bin/oncepay-lab), run every incident drill,
## write report.html. It builds only the binaries it runs: I14 starts instances of bin/oncepay
## on a private MariaDB primary and replica.
drill:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/ ./cmd/oncepay ./tools/cmd/oncepay-lab ./tools/cmd/drill
	./tools/drill.sh

## chaos: the full chaos run: a private MariaDB, Redis, Kafka, the channel simulator and three
## oncepay processes behind a private nginx gateway (127.0.0.1:8801) under kill -9, SIGSTOP, Redis,
## MariaDB and Kafka broker crashes, with a faulty merchant receiver of the webhooks;
## ≥ 10,000 deliveries, then a history checker. Needs mariadbd, mariadb-install-db, redis-server, redis-cli and nginx
## on PATH. Output in chaos-out/ (history.jsonl, summary.json, webhooks.json, report.html);
## exit 1 on any violation. See docs/chaos.md.
## CHAOS_FLAGS=-redis-cluster runs Redis as a local cluster of three masters and three replicas
## and fails masters over (kill -9 and CLUSTER FAILOVER FORCE).
chaos: tools
	./bin/chaos -mode full $(CHAOS_FLAGS)

## chaos-short: the same in under 3 minutes (≥ 1,000 deliveries, every fault once); CI runs it.
chaos-short: tools
	./bin/chaos -mode short $(CHAOS_FLAGS)
# /fork:drop
