# Offline twin of the top-level Dockerfile's final stage: the static
# watcher, built on the host, alone in a FROM scratch image. Build context:
# the folder holding the binary.
#
#   make build
#   docker build -f image/watcher.Dockerfile -t deathwatch/watcher:latest bin
#   podman build -f image/watcher.Dockerfile -t deathwatch/watcher:latest bin
# (`make image`, or `ENGINE=podman make image`, runs the first two.)
FROM scratch
COPY watcher /usr/local/bin/watcher
ENTRYPOINT ["/usr/local/bin/watcher"]
