# herd-coordinator. Built by deploy/docker/build.sh from a context it stages:
# bin/ holds the binary built on the host (Bazel, Debian 12), so the image
# has no compiler and no Bazel; runtime-packages.txt is
# deploy/docker/runtime-packages/coordinator.txt, the Debian packages that
# hold the libraries the binary loads (build.sh checks it against ldd), which
# install_packages.sh installs, and nothing more.
ARG BASE=debian:12-slim
FROM ${BASE}
# The package list alone first: this layer is reused until the list changes.
COPY runtime-packages.txt install_packages.sh /tmp/
RUN /tmp/install_packages.sh /tmp/runtime-packages.txt && rm /tmp/runtime-packages.txt /tmp/install_packages.sh
# The chart runs every container as 65532 (non-root).
RUN groupadd --gid 65532 herd \
 && useradd --uid 65532 --gid herd --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin herd
COPY bin/herd-coordinator /usr/local/bin/
USER 65532:65532
EXPOSE 7070 7071
ENTRYPOINT ["/usr/local/bin/herd-coordinator"]
