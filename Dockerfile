# syntax=docker/dockerfile:1

# oncepay image: a static Go build in a pinned toolchain image, shipped on distroless as a
# non-root user. Two binaries go in: /oncepay (the server; `/oncepay migrate` applies the
# embedded migrations) and /channelsim (the payment channel simulator, which docker-compose.yml
# runs as a service of its own). The training kit (the drill, the chaos run, the lab)
# is not the service and is not in the image.
# deploy/compose_test.go checks the properties below (pinned bases, CGO off, non-root).

# ---- build ------------------------------------------------------------------------------
FROM golang:1.26.8-bookworm AS build
WORKDIR /src

# Module download is its own layer: it is rebuilt only when go.mod or go.sum change, not on
# every source edit. The idempotency kit is a module of its own that go.mod replaces with
# ./idempotent, so its go.mod and go.sum come in too.
COPY go.mod go.sum ./
COPY idempotent/go.mod idempotent/go.sum ./idempotent/
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download

COPY . .

# CGO off gives static binaries that run on distroless/static (no libc); the SQLite driver
# is pure Go, so the embedded mode still works. -trimpath and -s -w make the build
# reproducible and small.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/oncepay ./cmd/oncepay && \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/channelsim ./cmd/channelsim

# ---- run --------------------------------------------------------------------------------
# The :nonroot tag is pinned to Debian 12; it ships CA certificates and tzdata, and no shell.
FROM gcr.io/distroless/static-debian12:nonroot

COPY --from=build /out/oncepay /oncepay
COPY --from=build /out/channelsim /channelsim

# The home of the nonroot user (uid 65532) is writable, so ./data (embedded mode only) works.
WORKDIR /home/nonroot
USER nonroot:nonroot

EXPOSE 8080
ENTRYPOINT ["/oncepay"]
