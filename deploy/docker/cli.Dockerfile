# The herd CLI, e.g. for a Job or a debugging pod inside the cluster. Built
# by deploy/docker/build.sh from a context it stages: bin/herd built on the
# host, runtime-packages.txt = deploy/docker/runtime-packages/cli.txt,
# installed by install_packages.sh.
ARG BASE=debian:12-slim
FROM ${BASE}
# The package list alone first: this layer is reused until the list changes.
COPY runtime-packages.txt install_packages.sh /tmp/
RUN /tmp/install_packages.sh /tmp/runtime-packages.txt && rm /tmp/runtime-packages.txt /tmp/install_packages.sh
RUN groupadd --gid 65532 herd \
 && useradd --uid 65532 --gid herd --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin herd
COPY bin/herd /usr/local/bin/
USER 65532:65532
# Reads HERD_COORDINATOR and HERD_TOKEN_FILE (the chart's ConfigMap has both).
ENTRYPOINT ["/usr/local/bin/herd"]
