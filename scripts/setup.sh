#!/usr/bin/env bash
# Installs every Debian package herd needs to build, test and run the demo.
# Idempotent and fast when everything is already there (no apt-get update).
set -euo pipefail

PACKAGES=(
  # build
  bazel-bootstrap bazel-rules-java g++ protobuf-compiler protobuf-compiler-grpc
  libgrpc++-dev libprotobuf-dev libabsl-dev libtorch-dev libgloo-dev
  prometheus-cpp-dev libyaml-cpp-dev libcli11-dev nlohmann-json3-dev
  libsqlite3-dev libgoogle-glog-dev libgflags-dev libssl-dev zlib1g-dev
  libgtest-dev libgmock-dev
  # Debian's LibTorch calls whatever libblas.so.3 the alternatives system
  # provides; the reference BLAS is ~40x slower than OpenBLAS. The serial
  # build keeps one thread per trainer, as `threads: 1` promises.
  libopenblas0-serial
  # the coordinator's etcd store: the v3 API's .proto files (compiled by
  # //third_party/etcd), and etcd itself for the tests and for running one
  golang-etcd-server-dev etcd-server etcd-client
  # data, tests and benchmarks
  dataset-fashion-mnist prometheus python3 python3-torch
  # tests/testbed: hosts as network namespaces, rate shaping, packet loss
  iproute2 nftables
  # deploy/test: Helm's template engine rebuilt from Debian's Go packages,
  # Kubernetes schema checks in Node, certificates for the TLS case
  golang-go golang-github-masterminds-sprig-dev golang-gopkg-yaml.v2-dev
  golang-github-xeipuuv-gojsonschema-dev nodejs openssl
)
# Debian packages npm apart from nodejs; other nodejs builds bundle it (and
# conflict with Debian's npm), so ask for it only when it is missing.
command -v npm >/dev/null || PACKAGES+=(npm)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "herd setup: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "herd setup: done" >&2
