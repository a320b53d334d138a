# oncepay — the two commands a newcomer needs are `make run` and `make test`.
SHELL := /bin/bash
GO    ?= go
PKGS  := ./...

.PHONY: run test test-galera build migrate lint fmt-check tidy-check vet staticcheck compose-up bench bench-scale bench-soak

## run: build and start the server on :8080 with every dependency embedded.
run: build
	./bin/oncepay

## test: the whole suite: gofmt check, go vet, staticcheck, go test -race; then the
## idempotency kit's own suite once more on each other dialect (ONCEPAY_TEST_KIT_DIALECT),
## and the examples module, which imports the kit as a stranger would, and the example
## webhook receiver (a module of its own that imports nothing of oncepay).
KIT := ./idempotent/...
test: lint
	$(GO) test -race -count=1 -timeout 12m $(PKGS)
	ONCEPAY_TEST_KIT_DIALECT=sqlite $(GO) test -race -count=1 -timeout 5m $(KIT)
	@if [ -n "$$ONCEPAY_TEST_POSTGRES_DSN" ] || [ "$$CI" = true ]; then \
		echo "ONCEPAY_TEST_KIT_DIALECT=postgres $(GO) test -race -count=1 -timeout 5m $(KIT)"; \
		ONCEPAY_TEST_KIT_DIALECT=postgres $(GO) test -race -count=1 -timeout 5m $(KIT); \
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

## lint: gofmt, go mod tidy, go vet and staticcheck.
lint: fmt-check tidy-check vet staticcheck

tidy-check:
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1; }
	@cd examples && $(GO) mod tidy -diff || { echo "examples/go.mod is not tidy: run go mod tidy in examples"; exit 1; }
	@cd examples/webhook-receiver && $(GO) mod tidy -diff || { echo "examples/webhook-receiver/go.mod is not tidy: run go mod tidy there"; exit 1; }

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt wants to rewrite:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)
	cd examples && $(GO) vet ./...
	cd examples/webhook-receiver && $(GO) vet ./...

staticcheck:
	$(GO) tool staticcheck $(PKGS)

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

# ---- the training kit (tools/): the drill, the chaos run and the lab. A fork that keeps only the
# ---- service deletes tools/ and this block; the service builds and passes its tests without them.
.PHONY: drill chaos chaos-short tools

## tools: the training kit's binaries: bin/oncepay-lab (oncepay with /lab/), bin/drill, bin/chaos.
tools: build
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/oncepay-lab ./tools/cmd/oncepay-lab
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/drill ./tools/cmd/drill
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/chaos ./tools/cmd/chaos

## drill: start an embedded oncepay with the lab on (bin/oncepay-lab), run every incident drill,
## write report.html.
drill: tools
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
