# A first box's image without a registry: a static busybox alone in a
# FROM scratch image, every applet a link in /bin. Build context: a folder
# holding only the binary (`make busybox-image` makes one).
#
#   make busybox-image            # deathwatch/busybox:latest
#   ENGINE=podman make busybox-image
FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
ENV PATH=/bin
CMD ["/bin/sh"]
