# A sandbox template with the watcher baked in as PID 1.
#
#   docker build -f image/template.Dockerfile \
#     --build-arg BASE=debian:bookworm-slim \
#     --build-arg WATCHER_IMAGE=deathwatch/watcher:latest \
#     -t my-template:latest image
#
# BASE is your image (toolchain, agent user, ...). WATCHER_IMAGE is the
# FROM scratch watcher image: the top-level Dockerfile's final stage or
# image/watcher.Dockerfile (`make image`). With Podman, name local images
# fully: localhost/deathwatch/watcher:latest.
#
# Run it the way `supervisor exec --watcher-in-image /usr/local/bin/watcher`
# does: attached stdin/stdout is the control stream (docker run -i); the
# watcher reads hello + spec from it and starts the agent. Without a
# controller on the other end the watcher sees EOF and exits 245 (liveness
# lost) without starting anything: it fails closed.
ARG WATCHER_IMAGE=deathwatch/watcher:latest
ARG BASE=debian:bookworm-slim
FROM ${WATCHER_IMAGE} AS watcher

FROM ${BASE}
COPY --from=watcher /usr/local/bin/watcher /usr/local/bin/watcher
ENTRYPOINT ["/usr/local/bin/watcher", "--control=stdin"]
# The base image's CMD would otherwise become the watcher's arguments.
CMD []
