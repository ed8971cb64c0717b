# syntax=docker/dockerfile:1.4
# herd-worker for GPU nodes (NCCL), built against the CUDA LibTorch of a pip
# PyTorch wheel (HERD_LIBTORCH, see third_party/libtorch.bzl) and the CUDA
# runtime and NCCL of its nvidia-* wheels (HERD_CUDA, third_party/cuda.bzl).
# Build from the repository root:
#   docker build -f deploy/docker/worker-cuda.Dockerfile -t herd-worker-cuda:0.1.0 .
# The GPU driver comes from the node (NVIDIA container toolkit), not the image.

# The wheel must use the C++11 string ABI, as Debian's gRPC and protobuf do;
# PyTorch's Linux wheels do from 2.7 on.
ARG TORCH_VERSION=2.7.1
ARG TORCH_INDEX=https://download.pytorch.org/whl/cu126
# debian:12's Python is 3.11; the wheel's folders must sit at the same path
# in both stages because the binaries find LibTorch and CUDA by rpath.
ARG SITE=/opt/torch/lib/python3.11/site-packages

FROM debian:12 AS build
ARG TORCH_VERSION
ARG TORCH_INDEX
ARG SITE
WORKDIR /src
COPY scripts/setup.sh scripts/
RUN scripts/setup.sh \
 && apt-get install -y --no-install-recommends python3-venv python3-pip
RUN python3 -m venv /opt/torch \
 && /opt/torch/bin/pip install --no-cache-dir "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX}"
ENV HERD_LIBTORCH=${SITE}/torch HERD_CUDA=${SITE}/nvidia
COPY . .
RUN --mount=type=cache,target=/root/.cache \
    deploy/docker/bazel-build.sh //worker/daemon:herd-worker //worker/train:herd-trainer

FROM debian:12-slim
ARG SITE
# LibTorch itself comes from the wheel below; Gloo (CPU fallback) from Debian.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libabsl20220623 libatomic1 libgflags2.2 libgoogle-glog0v6 libgrpc++1.51 \
      libgrpc29 libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 \
      libprotobuf32 libgloo0 libgomp1 \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --gid 65532 herd \
 && useradd --uid 65532 --gid herd --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin herd
# Only the shared libraries of the wheels, not Python.
COPY --from=build ${SITE}/torch/lib ${SITE}/torch/lib
COPY --from=build ${SITE}/nvidia ${SITE}/nvidia
COPY --from=build /out/herd-worker /out/herd-trainer /usr/local/bin/
USER 65532:65532
EXPOSE 9100
ENTRYPOINT ["/usr/local/bin/herd-worker"]
