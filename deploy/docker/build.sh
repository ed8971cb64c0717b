#!/usr/bin/env bash
# Builds herd's container images with buildah (no Docker engine needed):
#   1. the base, a minimal Debian 12 (base.sh), when the store lacks it;
#   2. the binaries, with Bazel on this host (Debian 12, like the images);
#   3. herd-coordinator, herd-worker, herd-cli, and herd-worker-cuda when
#      HERD_IMAGE_LIBTORCH names a CUDA LibTorch (else it says why not),
#      tagged localhost/NAME:APPVERSION (the chart's appVersion, the tag the
#      chart renders with image.registry=localhost);
# then prints each image's size. Layers are cached between runs (--layers):
# an unchanged package list or binary reuses its layer.
#
#   deploy/docker/build.sh                 # run from anywhere in the checkout
#   deploy/docker/build.sh --write-package-lists   # refresh runtime-packages/
#
# Environment: HERD_BASE_IMAGE (default localhost/herd-base:bookworm),
# HERD_IMAGE_WORK (staging folder, default /var/tmp/herd-images),
# HERD_BAZEL_FLAGS (extra bazel build flags, e.g. --local_cpu_resources=2),
# HERD_IMAGE_LIBTORCH / HERD_IMAGE_CUDA (worker-cuda: a pip torch wheel's
# torch folder and its nvidia folder).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DOCKER_DIR="$REPO/deploy/docker"
BASE_IMAGE="${HERD_BASE_IMAGE:-localhost/herd-base:bookworm}"
WORK="${HERD_IMAGE_WORK:-/var/tmp/herd-images}"
read -r -a BAZEL_FLAGS <<<"${HERD_BAZEL_FLAGS:-}"
# The CPU images carry no CUDA: with HERD_CUDA pointing at nothing, NCCL
# builds as its stub and the binaries link no CUDA library, as on a Debian
# machine without a CUDA toolkit.
CPU_CUDA=/nonexistent

write_lists=false
case "${1:-}" in
  "") ;;
  --write-package-lists) write_lists=true ;;
  *) echo "usage: build.sh [--write-package-lists]" >&2; exit 2 ;;
esac

die() {
  echo "build.sh: $*" >&2
  exit 1
}

for tool in buildah podman debootstrap; do
  command -v "$tool" >/dev/null || die "$tool is missing (apt-get install -y buildah podman debootstrap)"
done
TAG="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$REPO/deploy/helm/herd/Chart.yaml")"
[ -n "$TAG" ] || die "no appVersion in deploy/helm/herd/Chart.yaml"

if ! buildah inspect --type image "$BASE_IMAGE" >/dev/null 2>&1; then
  echo "build.sh: no $BASE_IMAGE yet; making it (debootstrap, about a minute)"
  "$DOCKER_DIR/base.sh" "$BASE_IMAGE"
fi

# bazel_build ENV... : builds the image binaries with that environment.
bazel_build() {
  (cd "$REPO" && env "$@" scripts/bazel.sh build "${BAZEL_FLAGS[@]}" \
    //coordinator:herd-coordinator //worker/daemon:herd-worker //worker/train:herd-trainer //client:herd) ||
    die "bazel build failed"
}

# stage IMAGE BINARY...: a fresh build context with bin/, the package list
# and its installer.
stage() {
  local image="$1" context="$WORK/context-$1" list="$DOCKER_DIR/runtime-packages/$1.txt"
  shift
  rm -rf "$context"
  mkdir -p "$context/bin"
  cp -L "$@" "$context/bin/"
  chmod 0755 "$context"/bin/*
  local derived
  derived="$("$DOCKER_DIR/runtime_packages.sh" "${RUNTIME_PACKAGES_ARGS[@]}" "$context"/bin/*)" ||
    die "cannot derive $image's packages"
  if $write_lists; then
    printf '%s\n' "$derived" >"$list"
    echo "build.sh: wrote ${list#"$REPO"/}"
  fi
  [ -f "$list" ] || die "${list#"$REPO"/} is missing; run build.sh --write-package-lists"
  if [ "$derived" != "$(cat "$list")" ]; then
    diff <(cat "$list") <(printf '%s\n' "$derived") >&2 || true
    die "${list#"$REPO"/} differs from what the binaries load (< list, > ldd); run build.sh --write-package-lists"
  fi
  cp "$list" "$context/runtime-packages.txt"
  cp "$DOCKER_DIR/install_packages.sh" "$context/"
}

# build IMAGE: buildah bud of IMAGE.Dockerfile over its staged context.
build() {
  local image="$1" start=$SECONDS
  echo "build.sh: building localhost/herd-$image:$TAG"
  buildah bud --isolation chroot --layers --quiet --build-arg "BASE=$BASE_IMAGE" \
    -f "$DOCKER_DIR/$image.Dockerfile" -t "localhost/herd-$image:$TAG" "$WORK/context-$image" >"$WORK/$image.log" 2>&1 ||
    { tail -n 30 "$WORK/$image.log" >&2; die "buildah bud of $image.Dockerfile failed (log $WORK/$image.log)"; }
  echo "build.sh: herd-$image built in $((SECONDS - start)) s"
  BUILT+=("herd-$image")
}

mkdir -p "$WORK"
BUILT=()
BIN="$REPO/bazel-bin"

bazel_build HERD_CUDA="$CPU_CUDA"
RUNTIME_PACKAGES_ARGS=()
stage coordinator "$BIN/coordinator/herd-coordinator"
stage worker "$BIN/worker/daemon/herd-worker" "$BIN/worker/train/herd-trainer"
stage cli "$BIN/client/herd"
build coordinator
build worker
build cli

# worker-cuda needs a CUDA LibTorch, which Debian does not package: a pip
# wheel's torch folder (HERD_IMAGE_LIBTORCH) and its nvidia folder
# (HERD_IMAGE_CUDA). The binaries find both by rpath, so the image holds
# them at the same absolute paths.
cuda_missing=""
if [ -z "${HERD_IMAGE_LIBTORCH:-}" ]; then
  cuda_missing="HERD_IMAGE_LIBTORCH is not set (a CUDA LibTorch: a pip torch wheel's torch folder, e.g. from download.pytorch.org/whl/cu126; Debian packages only the CPU LibTorch)"
elif [ ! -e "$HERD_IMAGE_LIBTORCH/lib/libtorch_cuda.so" ]; then
  cuda_missing="HERD_IMAGE_LIBTORCH=$HERD_IMAGE_LIBTORCH has no lib/libtorch_cuda.so"
elif [ ! -d "${HERD_IMAGE_CUDA:-}" ]; then
  cuda_missing="HERD_IMAGE_CUDA (the wheel's site-packages/nvidia folder) is not a folder"
fi
if [ -n "$cuda_missing" ]; then
  echo "build.sh: herd-worker-cuda skipped: $cuda_missing"
else
  bazel_build HERD_LIBTORCH="$HERD_IMAGE_LIBTORCH" HERD_CUDA="$HERD_IMAGE_CUDA"
  RUNTIME_PACKAGES_ARGS=(--bundled "$HERD_IMAGE_LIBTORCH" --bundled "$HERD_IMAGE_CUDA")
  stage worker-cuda "$BIN/worker/daemon/herd-worker" "$BIN/worker/train/herd-trainer"
  # At the paths the rpath names (as given, links not resolved).
  for dir in "$HERD_IMAGE_LIBTORCH/lib" "$HERD_IMAGE_CUDA"; do
    [[ "$dir" == /* ]] || die "$dir: HERD_IMAGE_LIBTORCH and HERD_IMAGE_CUDA must be absolute"
    mkdir -p "$WORK/context-worker-cuda/bundled$dir"
    cp -a "$dir/." "$WORK/context-worker-cuda/bundled$dir/"
  done
  build worker-cuda
fi

echo
printf '%-34s %s\n' IMAGE SIZE
for name in "${BUILT[@]}"; do
  printf '%-34s %s\n' "localhost/$name:$TAG" "$(podman image inspect --format '{{.Size}}' "localhost/$name:$TAG" | numfmt --to=iec)"
done
