# The watcher as an image: a FROM scratch stage holding only the static
# watcher at /usr/local/bin/watcher, so that any template can take it with
#   COPY --from=deathwatch/watcher:latest /usr/local/bin/watcher /usr/local/bin/watcher
# (image/template.Dockerfile does exactly that).
#
#   docker build -t deathwatch/watcher:latest .
#
# The builder stage pulls golang from a registry. Without one, build the
# binary on the host and use the offline recipe instead (same result):
#   make image            # = make build && docker build -f image/watcher.Dockerfile -t deathwatch/watcher:latest bin

ARG GO_VERSION=1.26
FROM docker.io/library/golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Static, trimmed, no PIE (without cgo a PIE needs a dynamic loader, which
# a FROM scratch image does not have). Both without the Green Tea GC, as
# the Makefile builds them (BUILD_GOEXPERIMENT says why).
ENV CGO_ENABLED=0 GOEXPERIMENT=nogreenteagc
RUN go build -trimpath -ldflags "-s -w -buildid=" -o /out/watcher ./cmd/watcher \
 && go build -trimpath -ldflags "-s -w -buildid=" -o /out/supervisor ./cmd/supervisor

# The supervisor, for hosts that want it from an image (docker cp, or
# COPY --from=... --target supervisor). Not the default target.
FROM scratch AS supervisor
COPY --from=build /out/supervisor /usr/local/bin/supervisor
ENTRYPOINT ["/usr/local/bin/supervisor"]

# Final stage (the default target): only the watcher.
FROM scratch AS watcher
COPY --from=build /out/watcher /usr/local/bin/watcher
ENTRYPOINT ["/usr/local/bin/watcher"]
