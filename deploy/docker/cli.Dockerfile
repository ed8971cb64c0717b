# syntax=docker/dockerfile:1.4
# The herd CLI, e.g. for a Job or a debugging pod inside the cluster. Build
# from the repository root:
#   docker build -f deploy/docker/cli.Dockerfile -t herd-cli:0.1.0 .

FROM debian:12 AS build
WORKDIR /src
COPY scripts/setup.sh scripts/
RUN scripts/setup.sh
COPY . .
RUN --mount=type=cache,target=/root/.cache \
    deploy/docker/bazel-build.sh //client:herd

FROM debian:12-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libabsl20220623 libatomic1 libgrpc++1.51 libgrpc29 libprotobuf32 libyaml-cpp0.7 \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --gid 65532 herd \
 && useradd --uid 65532 --gid herd --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin herd
COPY --from=build /out/herd /usr/local/bin/
USER 65532:65532
# Reads HERD_COORDINATOR and HERD_TOKEN_FILE (the chart's ConfigMap has both).
ENTRYPOINT ["/usr/local/bin/herd"]
