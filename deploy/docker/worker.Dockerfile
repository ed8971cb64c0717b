# syntax=docker/dockerfile:1.4
# herd-worker for CPU nodes (Gloo), with Debian's LibTorch. Build from the
# repository root:
#   docker build -f deploy/docker/worker.Dockerfile -t herd-worker:0.1.0 .

FROM debian:12 AS build
WORKDIR /src
COPY scripts/setup.sh scripts/
RUN scripts/setup.sh
COPY . .
RUN --mount=type=cache,target=/root/.cache \
    deploy/docker/bazel-build.sh //worker/daemon:herd-worker //worker/train:herd-trainer

FROM debian:12-slim
# The daemon's and the trainer's shared libraries; libtorch1.13 brings its
# own dependencies (large: Debian builds LibTorch with OpenCV and friends).
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libabsl20220623 libatomic1 libgflags2.2 libgoogle-glog0v6 libgrpc++1.51 \
      libgrpc29 libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 \
      libprotobuf32 libtorch1.13 libgloo0 \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --gid 65532 herd \
 && useradd --uid 65532 --gid herd --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin herd
# The daemon starts herd-trainer from here (the chart passes --trainer-binary).
COPY --from=build /out/herd-worker /out/herd-trainer /usr/local/bin/
USER 65532:65532
EXPOSE 9100
ENTRYPOINT ["/usr/local/bin/herd-worker"]
