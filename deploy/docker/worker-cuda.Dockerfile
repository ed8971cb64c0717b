# herd-worker for GPU nodes (NCCL). Built by deploy/docker/build.sh when the
# host has a CUDA LibTorch: herd-worker and herd-trainer built there with
# HERD_LIBTORCH = a pip PyTorch wheel's torch folder and HERD_CUDA = its
# nvidia-* wheels' folder (third_party/libtorch.bzl, cuda.bzl). The context:
#   bin/                  the two binaries
#   bundled/              the wheels' shared libraries, at the absolute paths
#                         the binaries' rpath names (as on the build host)
#   runtime-packages.txt  deploy/docker/runtime-packages/worker-cuda.txt: the
#                         Debian packages for every other library (ldd)
#   install_packages.sh   installs them, and nothing more
# The wheel must use the C++11 string ABI, as Debian's gRPC and protobuf do
# (PyTorch's Linux wheels do from 2.7 on). The GPU driver comes from the
# node (NVIDIA container toolkit), not the image.
ARG BASE=debian:12-slim
FROM ${BASE}
# The package list alone first: this layer is reused until the list changes.
COPY runtime-packages.txt install_packages.sh /tmp/
RUN /tmp/install_packages.sh /tmp/runtime-packages.txt && rm /tmp/runtime-packages.txt /tmp/install_packages.sh
RUN groupadd --gid 65532 herd \
 && useradd --uid 65532 --gid herd --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin herd
COPY bundled/ /
COPY bin/herd-worker bin/herd-trainer /usr/local/bin/
USER 65532:65532
EXPOSE 9100
ENTRYPOINT ["/usr/local/bin/herd-worker"]
