# herd-worker for CPU nodes (Gloo), with Debian's LibTorch. Built by
# deploy/docker/build.sh from a context it stages: bin/ holds herd-worker and
# herd-trainer built on the host without CUDA (NCCL is the stub), so the
# image has no compiler, no Bazel and no CUDA; runtime-packages.txt is
# deploy/docker/runtime-packages/worker.txt (checked against ldd), installed
# by install_packages.sh. Debian's LibTorch links OpenCV and its media
# libraries, which makes the image large.
ARG BASE=debian:12-slim
FROM ${BASE}
# The package list alone first: this layer is reused until the list changes.
COPY runtime-packages.txt install_packages.sh /tmp/
RUN /tmp/install_packages.sh /tmp/runtime-packages.txt && rm /tmp/runtime-packages.txt /tmp/install_packages.sh
RUN groupadd --gid 65532 herd \
 && useradd --uid 65532 --gid herd --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin herd
# The daemon starts herd-trainer from here (the chart passes --trainer-binary).
COPY bin/herd-worker bin/herd-trainer /usr/local/bin/
USER 65532:65532
EXPOSE 9100
ENTRYPOINT ["/usr/local/bin/herd-worker"]
