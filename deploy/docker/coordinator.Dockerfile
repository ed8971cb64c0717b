# syntax=docker/dockerfile:1.4
# herd-coordinator. Build from the repository root:
#   docker build -f deploy/docker/coordinator.Dockerfile -t herd-coordinator:0.1.0 .

FROM debian:12 AS build
WORKDIR /src
# The package list alone first: this layer survives source changes.
COPY scripts/setup.sh scripts/
RUN scripts/setup.sh
COPY . .
# The cache mount keeps Bazel's disk cache between image builds.
RUN --mount=type=cache,target=/root/.cache \
    deploy/docker/bazel-build.sh //coordinator:herd-coordinator

FROM debian:12-slim
# Only the shared libraries the binary links (readelf -d NEEDED).
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libabsl20220623 libatomic1 libgflags2.2 libgoogle-glog0v6 libgrpc++1.51 \
      libgrpc29 libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 \
      libprotobuf32 libsqlite3-0 \
 && rm -rf /var/lib/apt/lists/*
# The chart runs every container as 65532 (non-root).
RUN groupadd --gid 65532 herd \
 && useradd --uid 65532 --gid herd --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin herd
COPY --from=build /out/herd-coordinator /usr/local/bin/
USER 65532:65532
EXPOSE 7070 7071
ENTRYPOINT ["/usr/local/bin/herd-coordinator"]
